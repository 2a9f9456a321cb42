from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import principal_of
from api.conditional import conditional_read
from operations import schema
from operations.selectors import get_operation
from operations.serializers import OperationOutput, polling_headers


class OperationDetail(APIView):
    @schema.get_operation
    @conditional_read
    def get(self, request: Request, operation_id: str) -> Response:
        operation = get_operation(tenant=principal_of(request).tenant, operation_id=operation_id)
        headers = polling_headers(operation)
        headers.pop("Location")
        return Response(OperationOutput(operation).data, headers=headers)
