"""Order reads, always scoped to the caller's tenant."""

from django.db.models import QuerySet
from rest_framework.exceptions import NotFound

from accounts.models import Tenant
from orders.models import Order, Payment


def orders_of(*, tenant: Tenant) -> QuerySet[Order]:
    return Order.objects.filter(tenant=tenant).prefetch_related("items", "payments")


def get_order(*, tenant: Tenant, order_id: str, for_update: bool = False) -> Order:
    """The tenant's order; another tenant's is as absent as a missing one.

    :raises NotFound: no such order in this tenant.
    """
    orders = Order.objects.filter(tenant=tenant)
    orders = (
        orders.select_for_update() if for_update else orders.prefetch_related("items", "payments")
    )
    order = orders.filter(pk=order_id).first()
    if order is None:
        raise NotFound(f"No order {order_id}.")
    return order


def get_payment(*, tenant: Tenant, payment_id: str) -> Payment:
    """The tenant's payment.

    :raises NotFound: no such payment in this tenant.
    """
    payment = Payment.objects.filter(tenant=tenant, pk=payment_id).first()
    if payment is None:
        raise NotFound(f"No payment {payment_id}.")
    return payment
