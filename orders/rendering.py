"""Orders as reads answer them, rendered from rows without DRF's per-field machinery: a speed trick.

A page of GET /v1/orders is up to 200 orders of up to 100 lines. Through
OrderOutput over selectors.orders_of, each line of such a page is a model
instance and a serializer's walk over its fields; the instances are held
in reference cycles until a full collection, so threads serving such pages
grow a process and it stays grown. From rows by the function below, a
page costs several times less Python and memory, and what remains is the
size of the answer (encoding its JSON, reading its rows), not the way it
is built. A read of one order, ``GET /v1/orders/{id}``, is rendered the
same way from its row (selectors.order_row): through OrderOutput over an
instance with its prefetched lines and payments it cost two queries more.
The figures: docs/SCALING.md, "A page of the list" and "Retries and reads".

OrderOutput stays the definition of an order's representation and the
schema's source; tests/orders/test_order_list.py holds this function's
output byte for byte to OrderOutput's for the same orders, and the
read's ETag to ``order_etag``. To remove the
trick, render OrderOutput(page, many=True) over a page of
selectors.orders_of, and OrderOutput(order) of selectors.get_order.
"""

from collections.abc import Sequence
from typing import Any

from rest_framework import serializers

from orders.links import order_path
from orders.models import Order
from orders.selectors import LISTED_COLUMNS, OrderRelations

# OrderOutput's createdAt and updatedAt, so that times are written by DRF's
# rules (settings.REST_FRAMEWORK's format, the current time zone) alone.
_WIRE_TIME = serializers.DateTimeField()


def orders_from_rows(
    orders: Sequence[dict[str, Any]], relations: OrderRelations
) -> list[dict[str, Any]]:
    """``OrderOutput(many=True).data`` of ``orders``, rows of ``selectors.LISTED_COLUMNS``."""
    time = _WIRE_TIME.to_representation
    lines, payment_ids = relations.lines, relations.payment_ids
    return [
        {
            "id": order["id"],
            "customerId": order["customer_id"],
            "status": order["status"],
            "currency": order["currency"],
            "totalAmount": order["total_amount"],
            "items": [
                {"sku": sku, "qty": qty, "unitPrice": unit_price, "lineTotal": line_total}
                for _, sku, qty, unit_price, line_total in lines.get(order["internal_id"], ())
            ],
            "payments": payment_ids.get(order["internal_id"], []),
            "createdAt": time(order["created_at"]),
            "updatedAt": time(order["updated_at"]),
            "links": {"self": order_path(order["id"])},
        }
        for order in orders
    ]


def order_of(order: Order) -> dict[str, Any]:
    """``OrderOutput(order).data`` of an order whose ``lines`` and ``payment_ids`` are current.

    What a command answers and its event carries (orders/domain_events.py):
    with OrderOutput, a first execution of ``POST /v1/orders`` built its
    fields and those of its lines twice (docs/SCALING.md, "Where a create's
    Python went"). tests/orders/test_rendering.py holds it to OrderOutput.
    To remove the trick, render ``OrderOutput(order).data`` where it is called.
    """
    row = {name: getattr(order, name) for name in LISTED_COLUMNS}
    lines = [
        (line.position, line.sku, line.qty, line.unit_price, line.line_total)
        for line in order.lines
    ]
    relations = OrderRelations(
        lines={order.internal_id: lines}, payment_ids={order.internal_id: order.payment_ids}
    )
    return orders_from_rows([row], relations)[0]


def order_command_answer(order: Order) -> dict[str, Any]:
    """``OrderCommandOutput(OrderCommandOutput.of(order)).data``, by :func:`order_of`."""
    return {
        "status": "succeeded",
        "orderId": order.id,
        "order": order_of(order),
        "links": {"self": order_path(order.id)},
    }
