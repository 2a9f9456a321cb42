"""Operation reads, scoped to the caller's tenant."""

from accounts.models import Tenant
from api.errors import NotFound
from operations.models import Operation


class NoSuchOperation(NotFound):
    """An operation id in the path names no operation of the caller's tenant."""


def get_operation(*, tenant: Tenant, operation_id: str) -> Operation:
    """The tenant's operation, read from our table (never from a result backend).

    :raises NoSuchOperation: no such operation in this tenant.
    """
    operation = Operation.objects.filter(tenant=tenant, pk=operation_id).first()
    if operation is None:
        raise NoSuchOperation(f"No operation {operation_id}.")
    return operation
