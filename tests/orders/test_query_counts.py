"""What a command costs the database, pinned (docs/SCALING.md quotes these numbers)."""

from typing import Any

import pytest
from django.db import connection
from pytest_django import DjangoAssertNumQueries

from tests.orders.conftest import PlaceOrders
from tests.support.http import Api, body_of, payment_body, problem

# Transactional, so the command runs in a real transaction as in production
# (inside a test transaction its outer block would add a savepoint pair).
pytestmark = pytest.mark.django_db(transaction=True)

# Authenticate; look for the key's answer, which is not there; BEGIN; claim
# the key (bounding the waits in the same query); read the catalog; insert
# the order; insert its lines; insert its order.created event; read the
# tenant's webhook endpoints (none: no delivery to insert); store the
# response; COMMIT. No savepoint and nothing read back for the answer. The
# claim sends the BEGIN and the store the COMMIT: 9 round trips, the
# look-up's the one the protocol adds.
CREATE_ORDER_QUERIES = 11
# Authenticate; read the key's answer. No transaction, no claim.
REPLAY_QUERIES = 2


def test_creating_an_order_costs_a_fixed_number_of_queries(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    order_body["items"] = [{"sku": "ABC", "qty": 1}, {"sku": "XYZ", "qty": 2}]

    with django_assert_num_queries(CREATE_ORDER_QUERIES) as captured:
        response = api.post("/v1/orders", order_body, key="K")

    assert response.status_code == 201
    assert_the_protocol_costs_one_round_trip(captured.captured_queries)


def assert_the_protocol_costs_one_round_trip(queries: list[dict[str, str]]) -> None:
    """The look-up, and a claim that sends the transaction's BEGIN and a store its COMMIT.

    Django logs its BEGIN and COMMIT apart (the third and the last query),
    but sends nothing for them: a first execution's 11 queries are 9 round
    trips, the command's own and the look-up.
    """
    sent = [q["sql"] for q in queries]
    look_up = sent[1]
    assert look_up.startswith("SELECT")
    assert "idempotency_storedanswer" in look_up
    assert (sent[2], sent[-1]) == ("BEGIN", "COMMIT")
    claim, store = sent[3], sent[-2]
    assert claim.startswith("BEGIN; SET LOCAL lock_timeout")
    assert 'INSERT INTO "idempotency_idempotencykey"' in claim
    assert store.startswith('INSERT INTO "idempotency_storedanswer"')
    assert store.endswith("; COMMIT")


def test_a_replay_is_one_read_that_writes_and_locks_nothing(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    api.post("/v1/orders", order_body, key="K")
    before = _key_row_versions()

    with django_assert_num_queries(REPLAY_QUERIES) as captured:
        response = api.post("/v1/orders", order_body, key="K")

    assert response["Idempotent-Replayed"] == "true"
    # No transaction begun, no claim, no write.
    assert all(q["sql"].startswith("SELECT") for q in captured.captured_queries)
    # The same row version, and no row lock taken on it (a lock sets xmax).
    assert _key_row_versions() == before
    assert [xmax for _, xmax in before] == ["0"]


def _key_row_versions() -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text, xmax::text FROM idempotency_idempotencykey")
        versions: list[tuple[str, str]] = cursor.fetchall()
        return versions


# A conflict reads the key as a replay does, and then its field digests
# (left out of the replay's read) to name the fields that differ.
CONFLICT_QUERIES = REPLAY_QUERIES + 1


def test_a_conflict_costs_a_replay_and_the_field_digests(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    api.post("/v1/orders", order_body, key="K")
    order_body["currency"] = "USD"

    with django_assert_num_queries(CONFLICT_QUERIES):
        response = api.post("/v1/orders", order_body, key="K")

    assert response.status_code == 409
    assert problem(response)["details"]["mismatch"] == ["/currency"]


# Authenticate; look for the key's answer; BEGIN; claim; lock the order;
# insert the payment; insert the operation; store the response; COMMIT.
START_PAYMENT_QUERIES = 9
# A replay of an asynchronous command also reads its operation's status.
ASYNC_REPLAY_QUERIES = REPLAY_QUERIES + 1


def test_starting_a_payment_costs_a_fixed_number_of_queries(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    order = body_of(api.post("/v1/orders", order_body, key="o"))["order"]
    body = payment_body(order)

    with django_assert_num_queries(START_PAYMENT_QUERIES) as captured:
        first = api.post("/v1/payments", body, key="p")
    assert_the_protocol_costs_one_round_trip(captured.captured_queries)
    with django_assert_num_queries(ASYNC_REPLAY_QUERIES):
        replay = api.post("/v1/payments", body, key="p")

    assert first.status_code == replay.status_code == 202


# Authenticate; the order joined to its lines; its payment ids. Rendered
# from those rows (orders/rendering.py).
READ_ORDER_QUERIES = 3


def test_a_read_of_an_order_costs_a_fixed_number_of_queries(
    api: Api, place_orders: PlaceOrders, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    (order,) = place_orders(api.principal.tenant, count=1, lines=100)

    with django_assert_num_queries(READ_ORDER_QUERIES):
        response = api.get(f"/v1/orders/{order.id}")

    assert len(body_of(response)["items"]) == 100


# Authenticate; the page of orders; the page's lines; their payments. The
# lines and payments of a whole page are one query each, however many
# orders and lines: a list page costs no query per order (no N+1).
LIST_PAGE_QUERIES = 4


@pytest.mark.parametrize("lines", [1, 100])
def test_a_full_page_of_the_list_costs_a_fixed_number_of_queries(
    api: Api,
    place_orders: PlaceOrders,
    django_assert_num_queries: DjangoAssertNumQueries,
    lines: int,
) -> None:
    place_orders(api.principal.tenant, count=200, lines=lines)

    with django_assert_num_queries(LIST_PAGE_QUERIES):
        response = api.get("/v1/orders?pageSize=200")

    page = body_of(response)["results"]
    assert len(page) == 200
    assert {len(entry["items"]) for entry in page} == {lines}
