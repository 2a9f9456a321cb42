"""An order is the same bytes wherever it is read, however the read builds it.

``GET /v1/orders`` and ``GET /v1/orders/{id}`` render rows with
``orders_from_rows``, not with ``OrderOutput`` (orders/rendering.py says
why); ``OrderOutput`` remains the definition of an order's representation
and the schema's source. These tests hold the two to the same bytes, the
read's ETag to ``order_etag`` (which ``If-Match`` compares), and the list
to ``GET /v1/orders/{id}``.
"""

import pytest
from pytest_django import DjangoAssertNumQueries
from rest_framework.renderers import JSONRenderer

from orders import selectors, services
from orders.inputs import NewOrder, OrderLine
from orders.models import Order, Payment
from orders.rendering import orders_from_rows
from orders.serializers import OrderOutput, order_etag
from tests.orders.conftest import PlaceOrders
from tests.support.http import Api, body_of

pytestmark = pytest.mark.django_db

NEWEST_FIRST = ("-created_at", "-id")


@pytest.mark.parametrize("lines", [1, 100])
def test_each_entry_of_a_page_is_the_read_of_its_order(
    api: Api, place_orders: PlaceOrders, lines: int
) -> None:
    placed = place_orders(api.principal.tenant, count=3, lines=lines)
    _pay_twice(placed[1])

    page = body_of(api.get("/v1/orders?pageSize=200"))["results"]

    assert [entry["id"] for entry in page] == [order.id for order in placed[::-1]]
    assert [len(entry["items"]) for entry in page] == [lines] * 3
    for entry in page:
        assert entry == body_of(api.get(f"/v1/orders/{entry['id']}"))


def test_the_lists_entries_are_the_bytes_order_output_writes(
    api: Api, stranger_api: Api, place_orders: PlaceOrders
) -> None:
    tenant = api.principal.tenant
    place_orders(tenant, count=2, lines=100)
    paid_twice, *_ = place_orders(tenant, count=2, lines=1)
    _pay_twice(paid_twice)
    services.cancel_order(tenant=tenant, order_id=place_orders(tenant, count=1, lines=3)[0].id)
    chosen = NewOrder(customer_id="c", currency="RUB", items=[OrderLine(sku="ABC", qty=7)])
    # A client's id is not the row's key: lines and payments hang on the key.
    for owner in (tenant, stranger_api.principal.tenant):
        services.put_order(tenant=owner, order_id="ord_chosen", new_order=chosen)
    rows = list(selectors.order_rows_of(tenant=tenant).order_by(*NEWEST_FIRST))

    fast = orders_from_rows(rows, selectors.relations_of(orders=rows))
    slow = OrderOutput(selectors.orders_of(tenant=tenant).order_by(*NEWEST_FIRST), many=True).data

    assert len(fast) == 6
    assert {entry["status"] for entry in fast} == {"pending", "cancelled"}
    assert JSONRenderer().render(fast) == JSONRenderer().render(slow)


def test_the_read_of_an_order_is_the_bytes_order_output_writes(
    api: Api, stranger_api: Api, place_orders: PlaceOrders
) -> None:
    tenant = api.principal.tenant
    (hundred_lines,) = place_orders(tenant, count=1, lines=100)
    (paid_twice,) = place_orders(tenant, count=1, lines=1)
    _pay_twice(paid_twice)
    (cancelled,) = place_orders(tenant, count=1, lines=3)
    services.cancel_order(tenant=tenant, order_id=cancelled.id)
    chosen = NewOrder(customer_id="c", currency="RUB", items=[OrderLine(sku="ABC", qty=7)])
    # The same id in another tenant is another order, with lines of its own.
    for owner in (stranger_api.principal.tenant, tenant):
        services.put_order(tenant=owner, order_id="ord_chosen", new_order=chosen)

    for order_id in (hundred_lines.id, paid_twice.id, cancelled.id, "ord_chosen"):
        response = api.get(f"/v1/orders/{order_id}")
        order = selectors.get_order(tenant=tenant, order_id=order_id)

        assert response.content == JSONRenderer().render(OrderOutput(order).data)
        assert response["ETag"] == order_etag(order)


def test_no_order_has_no_relations_and_costs_no_query(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    with django_assert_num_queries(0):
        relations = selectors.relations_of(orders=[])

    assert orders_from_rows([], relations) == []


def _pay_twice(order: Order) -> None:
    """A declined payment, then one in progress: two ids, oldest first."""
    for status in (Payment.Status.FAILED, Payment.Status.PROCESSING):
        Payment.objects.create(
            tenant=order.tenant,
            order=order,
            amount=order.total_amount,
            currency=order.currency,
            payment_method="pm_card_ok",
            status=status,
        )
