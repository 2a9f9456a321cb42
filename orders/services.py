"""Order commands. Each is one typed function with a visible transaction."""

from dataclasses import dataclass

from django.db import transaction

from accounts.models import Tenant
from config.exceptions import ApplicationError
from orders.models import Order, OrderItem, Product
from orders.selectors import get_order


class UnknownSku(ApplicationError):
    status_code = 422
    code = "UnknownSku"
    title = "Unknown SKU"
    default_message = "The order names a SKU that is not in the catalog."


class CurrencyMismatch(ApplicationError):
    status_code = 422
    code = "CurrencyMismatch"
    title = "Currency mismatch"
    default_message = "An item is priced in another currency than the order."


class OrderStateConflict(ApplicationError):
    status_code = 409
    code = "OrderStateConflict"
    title = "Order state conflict"
    default_message = "The order's state does not allow this command."


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


def cancel_order(*, tenant: Tenant, order_id: str, reason: str = "") -> Order:
    """Cancel a pending order; cancelling a cancelled order changes nothing.

    :raises NotFound: no such order in this tenant.
    :raises OrderStateConflict: the order cannot be cancelled in its state.
    """
    with transaction.atomic():
        # Locked, so a concurrent payment or cancel sees the outcome of ours.
        order = get_order(tenant=tenant, order_id=order_id, for_update=True)
        if order.status == Order.Status.CANCELLED:
            return order
        if order.status != Order.Status.PENDING:
            raise OrderStateConflict(f"A {order.status} order cannot be cancelled.")
        order.status = Order.Status.CANCELLED
        order.cancel_reason = reason
        order.save(update_fields=["status", "cancel_reason", "updated_at"])
    return order
