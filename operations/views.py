from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from operations.selectors import get_operation
from operations.serializers import OperationOutput, polling_headers


class OperationDetail(APIView):
    def get(self, request: Request, operation_id: str) -> Response:
        operation = get_operation(tenant=request.user.tenant, operation_id=operation_id)
        headers = polling_headers(operation)
        headers.pop("Location")
        return Response(OperationOutput(operation).data, headers=headers)
