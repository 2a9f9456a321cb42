"""Order and payment reads, always scoped to the caller's tenant."""

from django.db.models import QuerySet

from accounts.models import Tenant
from orders.errors import NoSuchOrder, NoSuchPayment
from orders.models import Order, Payment


def orders_of(*, tenant: Tenant) -> QuerySet[Order]:
    return Order.objects.filter(tenant=tenant).prefetch_related("items", "payments")


def get_order(*, tenant: Tenant, order_id: str) -> Order:
    """The tenant's order, with its lines and payments.

    :raises NoSuchOrder: no such order in this tenant (another tenant's is as
        absent as a missing one).
    """
    order = orders_of(tenant=tenant).filter(id=order_id).first()
    if order is None:
        raise NoSuchOrder(f"No order {order_id}.")
    return order


def get_payment(*, tenant: Tenant, payment_id: str) -> Payment:
    """The tenant's payment.

    :raises NoSuchPayment: no such payment in this tenant.
    """
    # With its order, whose id (unique per tenant, not the row's key) it shows.
    payment = Payment.objects.select_related("order").filter(tenant=tenant, pk=payment_id).first()
    if payment is None:
        raise NoSuchPayment(f"No payment {payment_id}.")
    return payment
