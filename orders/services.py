"""Order and payment commands.

Each command is one typed function with a visible transaction. The
idempotency layer opens the outer transaction (the key's claim, the
effects and the stored answer commit together), so these blocks nest in
it, and join it without a savepoint (``savepoint=False``): a command that
fails is rolled back whole, never resumed after the failed block, so a
savepoint would only cost two more round trips. Commands that need the
provider record an operation instead of calling it: a worker performs the
operation later (orders.handlers), calling the provider outside any
transaction and recording the outcome in one.

Every writer of an order or its payments takes the order's row lock first
(:func:`orders.locks.lock_order`), so that they take turns in one order and
never deadlock.
"""

from dataclasses import dataclass

from django.db import IntegrityError, transaction

from accounts.models import Tenant
from api.conditional import IfMatch
from api.ids import new_id
from api.plain_reads import Selected
from api.plain_writes import PlainInsert
from operations.models import Operation
from operations.services import start_operation, under_way
from orders import domain_events
from orders.errors import (
    AmountMismatch,
    CurrencyMismatch,
    NoSuchOrder,
    OrderAlreadyExists,
    OrderAlreadyPaid,
    OrderStateConflict,
    PaymentInProgress,
    UnknownOrder,
    UnknownSku,
)
from orders.handlers import CHARGE_PAYMENT, REFUND_ORDER
from orders.inputs import NewOrder, NewPayment
from orders.locks import lock_order
from orders.models import Order, OrderItem, Payment, Product
from orders.selectors import orders_of

# Every first execution inserts an order and its lines: as plain SQL
# written once (api/plain_writes.py says what that saves).
_ORDERS = PlainInsert(Order)
_LINES = PlainInsert(OrderItem)
# Every payment inserts its row the same way.
_PAYMENTS = PlainInsert(Payment)
# And reads the catalog's lines for them: ``Product.objects.in_bulk(skus)``
# as a plain SELECT written once (api/plain_reads.py).
_PRODUCTS = Selected.of(Product, "p", "sku", "unit_price", "currency")


# --- Orders -----------------------------------------------------------------


def create_order(*, tenant: Tenant, new_order: NewOrder) -> Order:
    """Place an order under a new id, priced from the catalog.

    :raises UnknownSku: an item's SKU is not in the catalog.
    :raises CurrencyMismatch: an item is priced in another currency.
    """
    with transaction.atomic(savepoint=False):
        return _place(tenant=tenant, new_order=new_order, order_id=None)


@dataclass(frozen=True)
class Placement:
    order: Order
    # False when the id held an equivalent order already.
    created: bool


def put_order(
    *,
    tenant: Tenant,
    order_id: str,
    new_order: NewOrder,
    if_match: IfMatch[Order] | None = None,
) -> Placement:
    """Place an order under the id the client chose, unless the id holds it already.

    The id is the client's intent: an order already under it that is
    equivalent (the same customer, currency and lines, whatever the prices
    have become) is the answer, not an error, so a client that lost the
    answer to its first PUT may send another under a new key.

    :raises PreconditionFailed: ``if_match`` does not match the order under
        the id, or there is none.
    :raises OrderAlreadyExists: the id holds a different order.
    :raises UnknownSku: an item's SKU is not in the catalog.
    :raises CurrencyMismatch: an item is priced in another currency.
    """
    with transaction.atomic(savepoint=False):
        existing = orders_of(tenant=tenant).filter(id=order_id).first()
        if if_match is not None:
            existing = if_match.check(existing)
        elif existing is None:
            try:
                # A savepoint: another PUT of the id may insert it first, and
                # the unique index refuses ours only once that one commits;
                # then we go on, in this transaction, with the order it made.
                with transaction.atomic():
                    return Placement(
                        _place(tenant=tenant, new_order=new_order, order_id=order_id),
                        created=True,
                    )
            except IntegrityError:
                existing = orders_of(tenant=tenant).get(id=order_id)
        if mismatch := _differences(existing, new_order):
            raise OrderAlreadyExists(details={"mismatch": mismatch})
        return Placement(existing, created=False)


def _place(*, tenant: Tenant, new_order: NewOrder, order_id: str | None) -> Order:
    """Insert the order and its lines; ``order_id`` None for an id of our own."""
    skus = {line.sku for line in new_order.items}
    products = {product.sku: product for product in _PRODUCTS.where(sku=list(skus))}
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
    # An id of our own is unique everywhere, so it serves as the row's key too.
    internal_id = new_id("ord")
    order = Order(
        internal_id=internal_id,
        id=order_id or internal_id,
        tenant=tenant,
        customer_id=new_order.customer_id,
        currency=new_order.currency,
        total_amount=sum(line.line_total for line in lines),
    )
    _ORDERS.insert(order)
    for line in lines:
        line.order = order
    _LINES.insert(*lines)
    order.lines = lines
    order.payment_ids = []
    domain_events.order_event(domain_events.ORDER_CREATED, order)
    return order


def _differences(order: Order, new_order: NewOrder) -> list[str]:
    """Where ``new_order`` differs from ``order``: JSON Pointers into the request body."""
    differences = [
        pointer
        for pointer, ours, theirs in (
            ("/customerId", order.customer_id, new_order.customer_id),
            ("/currency", order.currency, new_order.currency),
        )
        if ours != theirs
    ]
    for position, (line, asked) in enumerate(zip(order.lines, new_order.items, strict=False)):
        differences += [
            f"/items/{position}/{name}"
            for name, ours, theirs in (("sku", line.sku, asked.sku), ("qty", line.qty, asked.qty))
            if ours != theirs
        ]
    # A line one of them has and the other has not.
    shorter, longer = sorted((len(order.lines), len(new_order.items)))
    return differences + [f"/items/{position}" for position in range(shorter, longer)]


@dataclass(frozen=True)
class Cancellation:
    order: Order
    # The refund under way, when the order was paid; None when it is done.
    refund: Operation | None = None


def cancel_order(
    *,
    tenant: Tenant,
    order_id: str,
    reason: str = "",
    if_match: IfMatch[Order] | None = None,
) -> Cancellation:
    """Cancel an order: at once if pending, through a refund if paid.

    Cancelling a cancelled order changes nothing, and cancelling an order
    whose refund is under way answers that refund.

    :raises NoSuchOrder: no such order in this tenant.
    :raises PreconditionFailed: ``if_match`` does not match the order; it is
        checked under the order's lock, so that of two cancels sent with one
        tag, the second sees the first's change.
    :raises OrderStateConflict: a payment of the order is processing.
    """
    with transaction.atomic(savepoint=False):
        order = lock_order(tenant=tenant.pk, id=order_id)
        if order is None:
            raise NoSuchOrder(f"No order {order_id}.")
        if if_match is not None:
            if_match.check(order)
        if order.status == Order.Status.CANCELLED:
            return Cancellation(order=order)
        if order.status == Order.Status.PAID:
            if reason:
                order.cancel_reason = reason
                order.save(update_fields=["cancel_reason", "updated_at"])
            return Cancellation(order=order, refund=_start_refund(order))
        if order.payments.filter(status=Payment.Status.PROCESSING).exists():
            raise OrderStateConflict("A payment of this order is processing; retry when it ends.")
        order.status = Order.Status.CANCELLED
        order.cancel_reason = reason
        order.save(update_fields=["status", "cancel_reason", "updated_at"])
        domain_events.order_event(domain_events.ORDER_CANCELLED, order)
    return Cancellation(order=order)


# --- Payments ---------------------------------------------------------------


def start_payment(*, tenant: Tenant, new_payment: NewPayment) -> tuple[Payment, Operation]:
    """Record a payment and the operation that will charge it.

    :raises UnknownOrder: no such order in this tenant.
    :raises OrderStateConflict: the order is cancelled.
    :raises OrderAlreadyPaid: the order is paid.
    :raises PaymentInProgress: another payment of the order is processing.
    :raises CurrencyMismatch: the currency is not the order's.
    :raises AmountMismatch: the amount is not the order's total.
    """
    with transaction.atomic(savepoint=False):
        order = lock_order(tenant=tenant.pk, id=new_payment.order_id)
        if order is None:
            raise UnknownOrder(details={"orderId": new_payment.order_id})
        if order.status == Order.Status.CANCELLED:
            raise OrderStateConflict("A cancelled order cannot be paid.")
        if order.status == Order.Status.PAID:
            raise OrderAlreadyPaid()
        if new_payment.currency != order.currency:
            raise CurrencyMismatch(
                f"The order is in {order.currency}.", details={"currency": order.currency}
            )
        if new_payment.amount != order.total_amount:
            raise AmountMismatch(details={"totalAmount": order.total_amount})
        try:
            with transaction.atomic(savepoint=False):
                payment = Payment(
                    tenant=tenant,
                    order=order,
                    amount=new_payment.amount,
                    currency=new_payment.currency,
                    payment_method=new_payment.payment_method,
                )
                _PAYMENTS.insert(payment)
        except IntegrityError:
            # payment_one_live_per_order: a payment of this order is processing.
            raise PaymentInProgress() from None
        operation = start_operation(tenant=tenant, kind=CHARGE_PAYMENT, result_id=payment.id)
    return payment, operation


def _start_refund(order: Order) -> Operation:
    """The refund of a paid order: the one under way, or a new one.

    The caller holds the order's row lock.
    """
    refund = under_way(tenant_id=order.tenant_id, kind=REFUND_ORDER, result_id=order.id)
    return refund or start_operation(tenant=order.tenant, kind=REFUND_ORDER, result_id=order.id)
