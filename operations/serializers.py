from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from operations import registry
from operations.models import Operation
from operations.polling import retry_after_of


def operation_path(operation_id: str) -> str:
    return f"/v1/operations/{operation_id}"


def result_path(operation: Operation) -> str:
    path = registry.result_path_of(operation)
    if path is None:
        # get_operation never reads such a one for a client.
        raise LookupError(f"Operation kind {operation.kind!r} is the service's own work.")
    return path


class OperationErrorOutput(serializers.Serializer[Operation]):
    """Why an operation failed; ``null`` unless it did."""

    error = serializers.CharField(
        source="error_code",
        help_text=(
            "A stable code: `PaymentDeclined` or `RefundDeclined` (the provider refused), "
            "`ProviderUnavailable` (the provider kept refusing until the attempts ran out), "
            "`InternalError` (the attempts failed on our side)."
        ),
    )
    message = serializers.CharField(source="error_message", help_text="For people.")


class OperationLinksOutput(serializers.Serializer[Any]):
    self = serializers.CharField(help_text="This operation.")
    result = serializers.CharField(
        help_text="What it works on: the payment of a charge, the order of a refund."
    )


class OperationOutput(serializers.ModelSerializer[Operation]):
    resultId = serializers.CharField(source="result_id")
    error = serializers.SerializerMethodField()
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")
    links = serializers.SerializerMethodField()

    class Meta:
        model = Operation
        fields = ["id", "kind", "status", "resultId", "error", "createdAt", "updatedAt", "links"]

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # The kinds are known once the apps have registered them, after
        # this class is defined; the schema's enum lists those a client reads.
        fields["kind"] = serializers.ChoiceField(choices=registry.client_kinds())
        return fields

    @extend_schema_field(OperationErrorOutput(allow_null=True))
    def get_error(self, operation: Operation) -> dict[str, str] | None:
        if operation.status != Operation.Status.FAILED:
            return None
        return OperationErrorOutput(operation).data

    @extend_schema_field(OperationLinksOutput)
    def get_links(self, operation: Operation) -> dict[str, Any]:
        return {"self": operation_path(operation.id), "result": result_path(operation)}


def polling_headers(operation: Operation) -> dict[str, str]:
    """``Location`` of the operation, and ``Retry-After`` (by its age) while it is processing."""
    headers = {"Location": operation_path(operation.id)}
    if operation.status == Operation.Status.PROCESSING:
        headers["Retry-After"] = retry_after_of(operation.created_at)
    return headers
