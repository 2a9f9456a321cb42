from drf_spectacular.utils import OpenApiResponse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import principal_of
from config.openapi import not_found, path_id, read_schema
from operations.selectors import get_operation
from operations.serializers import OperationOutput, polling_headers


class OperationDetail(APIView):
    @read_schema(
        operation_id="getOperation",
        summary="Poll an operation",
        description=(
            "The state of asynchronous work, read from the database. `status` only moves "
            "forward: `processing` → `succeeded` | `failed`; `Retry-After` comes with "
            "`processing`. `resultId` names the payment (`payment.charge`) or the order "
            "(`order.refund`)."
        ),
        tag="operations",
        response=OpenApiResponse(OperationOutput, "The operation."),
        refusals=[not_found("operation", "op_5h7j9l1n3p5r7t9v1x3z5b7d9")],
        parameters=[path_id("operation_id", "op")],
        retry_after=True,
    )
    def get(self, request: Request, operation_id: str) -> Response:
        operation = get_operation(tenant=principal_of(request).tenant, operation_id=operation_id)
        headers = polling_headers(operation)
        headers.pop("Location")
        return Response(OperationOutput(operation).data, headers=headers)
