"""Order and payment reads, always scoped to the caller's tenant."""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from accounts.models import Tenant
from orders.errors import NoSuchOrder, NoSuchPayment
from orders.models import Order, OrderItem, Payment


def orders_of(*, tenant: Tenant) -> QuerySet[Order]:
    return Order.objects.filter(tenant=tenant).prefetch_related("items", "payments")


# What the list reads of an order: its own columns, as a dict per row.
LISTED_COLUMNS = (
    "internal_id",
    "id",
    "customer_id",
    "status",
    "currency",
    "total_amount",
    "created_at",
    "updated_at",
)
# A line as the list reads it: position, sku, qty, unit_price, line_total.
LineRow = tuple[int, str, int, int, int]


def order_rows_of(*, tenant: Tenant) -> QuerySet[Order, dict[str, Any]]:
    """The tenant's orders as rows of ``LISTED_COLUMNS``, for a page of the list.

    Rows rather than model instances: a page holds up to 200 orders, and
    their relations are read for the whole page at once by
    :func:`relations_of`.
    """
    rows: QuerySet[Order, dict[str, Any]] = Order.objects.filter(tenant=tenant).values(
        *LISTED_COLUMNS
    )
    return rows


@dataclass(frozen=True)
class OrderRelations:
    """The lines and payment ids of some orders, by the order's ``internal_id``."""

    lines: dict[str, list[LineRow]]
    payment_ids: dict[str, list[str]]


def relations_of(*, orders: Sequence[dict[str, Any]]) -> OrderRelations:
    """The lines (by position) and payment ids (oldest first) of ``orders``, rows of
    :func:`order_rows_of`: two queries however many orders and lines, none for no order.
    """
    keys = [order["internal_id"] for order in orders]
    lines: dict[str, list[LineRow]] = defaultdict(list)
    payment_ids: dict[str, list[str]] = defaultdict(list)
    if not keys:
        return OrderRelations(lines=lines, payment_ids=payment_ids)
    # Tuples, not instances: a page's 20,000 lines as OrderItems are left in
    # reference cycles (each caches its order) until the collector's next
    # full pass (docs/SCALING.md, "A page of the list").
    rows = OrderItem.objects.filter(order_id__in=keys).order_by()
    for row in rows.values_list("order_id", "position", "sku", "qty", "unit_price", "line_total"):
        lines[row[0]].append(row[1:])
    # Sorted here rather than by the database: PostgreSQL's sort of a page's
    # lines by (order_id, position) was most of its share of a 100-line page
    # (docs/SCALING.md, "A page of the list"); each order's hundred, read
    # nearly in order, sort here almost for free.
    for order_lines in lines.values():
        order_lines.sort()
    for order_key, payment_id in (
        Payment.objects.filter(order_id__in=keys)
        .order_by("created_at")
        .values_list("order_id", "id")
    ):
        payment_ids[order_key].append(payment_id)
    return OrderRelations(lines=lines, payment_ids=payment_ids)


# A line's columns as an order row joined to its lines reads them.
_LINE_COLUMNS = tuple(
    f"items__{name}" for name in ("position", "sku", "qty", "unit_price", "line_total")
)


def order_row(*, tenant: Tenant, order_id: str) -> tuple[dict[str, Any], OrderRelations]:
    """The tenant's order as a row of ``LISTED_COLUMNS``, with its lines and payment ids.

    Two queries: the order joined to its lines (a row per line, 100 at
    most), and its payment ids. What :func:`get_order` reads as instances,
    for a read that renders rows (orders/rendering.py).

    :raises NoSuchOrder: as :func:`get_order`.
    """
    rows = list(
        Order.objects.filter(tenant=tenant, id=order_id)
        .order_by()
        .values_list(*LISTED_COLUMNS, *_LINE_COLUMNS)
    )
    if not rows:
        raise NoSuchOrder(f"No order {order_id}.")
    order = dict(zip(LISTED_COLUMNS, rows[0][: len(LISTED_COLUMNS)], strict=True))
    key = order["internal_id"]
    # An order has at least one line; the join's row of an order without
    # any (NULLs) would not be one.
    lines = sorted(row[len(LISTED_COLUMNS) :] for row in rows if row[-1] is not None)
    payment_ids = list(
        Payment.objects.filter(order_id=key).order_by("created_at").values_list("id", flat=True)
    )
    return order, OrderRelations(lines={key: lines}, payment_ids={key: payment_ids})


def get_order(*, tenant: Tenant, order_id: str) -> Order:
    """The tenant's order, with its lines and payments, as instances.

    ``GET /v1/orders/{id}`` reads :func:`order_row` instead; its answer is
    held byte for byte to ``OrderOutput`` of this (tests/orders/test_order_list.py).

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
