"""Orders as reads answer them, rendered from rows without DRF's per-field machinery: a speed trick.

A page of GET /v1/orders is up to 200 orders of up to 100 lines. Through
OrderOutput over selectors.orders_of, 200 orders of 100 lines cost 415-635
ms of Python per page in one process (38-64 ms for orders of one line; the
bench's figure, tests/bench/in_process.py, on a busy 2-core machine) and
24 MB at the peak, in model instances held in reference cycles until a
full collection: 8 threads serving such pages took a process from 90 MB to
335-380 MB, and it stayed there. From rows by the function below: 58-91 ms
(13-23 ms), 10.7 MB at the peak, 176-194 MB under the 8 threads; the page's
CPU with PostgreSQL's is 3.9-4.5 times that of orders of one line (12-14
before). Half of what remains is encoding the 1.2 MB of JSON (20 ms) and
reading 20,000 rows (14 ms): the size of the answer, not the way it is built.
A read of one order, ``GET /v1/orders/{id}``, is rendered the same way
from its row (selectors.order_row): through OrderOutput over an instance
with its prefetched lines and payments it cost 4 queries and some 2 ms
more of Python than the read of two queries that it is now (docs/SCALING.md).

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

    What a command answers and its event carries (orders/domain_events.py): with
    OrderOutput, building its fields and those of its lines cost a first
    execution of ``POST /v1/orders`` 0.6 ms of Python for each of the two
    (docs/SCALING.md). tests/orders/test_rendering.py holds it to OrderOutput.
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
