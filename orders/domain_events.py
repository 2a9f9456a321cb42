"""The events orders and payments emit, each in the transaction of its effect.

Registered with the events app (events.registry) with the serializer of
their ``data``: the resource as its read endpoint shows it. Each function
below is called by the service or handler that has just made the effect,
in its transaction, after its compare-and-set has found the effect not
made yet (docs/SPECIFICATION.md §4 rule 11).
"""

from events import registry
from events.services import record_event
from orders.links import order_path, payment_path
from orders.models import Order, Payment
from orders.rendering import order_of
from orders.serializers import OrderOutput, PaymentOutput

ORDER_CREATED = "order.created"
ORDER_CANCELLED = "order.cancelled"
PAYMENT_SUCCEEDED = "payment.succeeded"
PAYMENT_FAILED = "payment.failed"
PAYMENT_REFUNDED = "payment.refunded"

registry.register(
    ORDER_CREATED, data=OrderOutput, description="An order was placed (`POST` or `PUT`)."
)
registry.register(
    ORDER_CANCELLED,
    data=OrderOutput,
    description="An order became cancelled: at the cancel, or when its refund succeeded.",
)
registry.register(PAYMENT_SUCCEEDED, data=PaymentOutput, description="A payment was charged.")
registry.register(
    PAYMENT_FAILED,
    data=PaymentOutput,
    description="A payment failed: declined, or nothing charged after its attempts ran out.",
)
registry.register(
    PAYMENT_REFUNDED, data=PaymentOutput, description="A paid order's payment was refunded."
)


def order_event(event_type: str, order: Order) -> None:
    """``event_type`` of ``order``, whose ``lines`` and ``payment_ids`` are current."""
    record_event(
        tenant=order.tenant,
        event_type=event_type,
        resource=order_path(order.id),
        data=order_of(order),
    )


def order_event_by_key(event_type: str, order_key: str) -> None:
    """``event_type`` of the order whose row key is ``order_key``, read as it is now."""
    order = (
        Order.objects.select_related("tenant")
        .prefetch_related("items", "payments")
        .get(pk=order_key)
    )
    order_event(event_type, order)


def payment_event(event_type: str, payment_id: str) -> None:
    """``event_type`` of the payment, read as it is now."""
    payment = Payment.objects.select_related("order", "tenant").get(pk=payment_id)
    record_event(
        tenant=payment.tenant,
        event_type=event_type,
        resource=payment_path(payment.id),
        data=PaymentOutput(payment).data,
    )
