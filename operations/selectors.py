"""Operation reads, scoped to the caller's tenant."""

from accounts.models import Tenant
from operations.errors import NoSuchOperation
from operations.models import Operation


def get_operation(*, tenant: Tenant, operation_id: str) -> Operation:
    """The tenant's operation, read from our table (never from a result backend).

    :raises NoSuchOperation: no such operation in this tenant.
    """
    operation = Operation.objects.filter(tenant=tenant, pk=operation_id).first()
    if operation is None:
        raise NoSuchOperation(f"No operation {operation_id}.")
    return operation
