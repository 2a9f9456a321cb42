"""Order commands. Each is one typed function with a visible transaction."""

from dataclasses import dataclass

from django.db import transaction

from accounts.models import Tenant
from operations.models import Operation
from orders.errors import CurrencyMismatch, OrderStateConflict, UnknownSku
from orders.models import Order, OrderItem, Payment, Product
from orders.payments import start_refund
from orders.selectors import get_order


@dataclass(frozen=True)
class OrderLine:
    sku: str
    qty: int


@dataclass(frozen=True)
class NewOrder:
    customer_id: str
    currency: str
    items: list[OrderLine]


def create_order(*, tenant: Tenant, new_order: NewOrder) -> Order:
    """Place an order priced from the catalog.

    :raises UnknownSku: an item's SKU is not in the catalog.
    :raises CurrencyMismatch: an item is priced in another currency.
    """
    skus = {line.sku for line in new_order.items}
    products = Product.objects.in_bulk(skus)
    if unknown := sorted(skus - products.keys()):
        raise UnknownSku(f"Unknown SKU: {', '.join(unknown)}.", details={"unknownSkus": unknown})
    if foreign := sorted(s for s in skus if products[s].currency != new_order.currency):
        raise CurrencyMismatch(
            f"Not priced in {new_order.currency}: {', '.join(foreign)}.",
            details={"skus": foreign, "currency": new_order.currency},
        )

    lines = [
        OrderItem(
            position=position,
            sku=line.sku,
            qty=line.qty,
            unit_price=products[line.sku].unit_price,
            line_total=products[line.sku].unit_price * line.qty,
        )
        for position, line in enumerate(new_order.items)
    ]
    with transaction.atomic():
        order = Order.objects.create(
            tenant=tenant,
            customer_id=new_order.customer_id,
            currency=new_order.currency,
            total_amount=sum(line.line_total for line in lines),
        )
        for line in lines:
            line.order = order
        OrderItem.objects.bulk_create(lines)
    return order


@dataclass(frozen=True)
class Cancellation:
    order: Order
    # The refund under way, when the order was paid; None when it is done.
    refund: Operation | None = None


def cancel_order(*, tenant: Tenant, order_id: str, reason: str = "") -> Cancellation:
    """Cancel an order: at once if pending, through a refund if paid.

    Cancelling a cancelled order changes nothing, and cancelling an order
    whose refund is under way answers that refund.

    :raises NotFound: no such order in this tenant.
    :raises OrderStateConflict: a payment of the order is processing.
    """
    with transaction.atomic():
        # Locked, so a concurrent payment or cancel sees the outcome of ours.
        order = get_order(tenant=tenant, order_id=order_id, for_update=True)
        if order.status == Order.Status.CANCELLED:
            return Cancellation(order=order)
        if order.status == Order.Status.PAID:
            if reason:
                order.cancel_reason = reason
                order.save(update_fields=["cancel_reason", "updated_at"])
            return Cancellation(order=order, refund=start_refund(order=order))
        if order.payments.filter(status=Payment.Status.PROCESSING).exists():
            raise OrderStateConflict("A payment of this order is processing; retry when it ends.")
        order.status = Order.Status.CANCELLED
        order.cancel_reason = reason
        order.save(update_fields=["status", "cancel_reason", "updated_at"])
    return Cancellation(order=order)
