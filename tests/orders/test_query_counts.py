"""What a command costs the database, pinned (the README quotes these numbers)."""

from typing import Any

import pytest
from pytest_django import DjangoAssertNumQueries

from tests.support.http import Api, body_of, payment_body

# Transactional, so the command runs in a real transaction as in production
# (inside a test transaction its outer block would add a savepoint pair).
pytestmark = pytest.mark.django_db(transaction=True)

# Authenticate; look the key up; BEGIN; bound the waits; claim the key;
# savepoint; read the catalog; savepoint (the service's own block); insert
# the order and its lines; release; read the lines and payments back for
# the answer; release; store the response; COMMIT.
CREATE_ORDER_QUERIES = 16
# Authenticate and look the key up: a replay takes no lock and writes nothing.
REPLAY_QUERIES = 2


def test_creating_an_order_costs_a_fixed_number_of_queries(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    order_body["items"] = [{"sku": "ABC", "qty": 1}, {"sku": "XYZ", "qty": 2}]

    with django_assert_num_queries(CREATE_ORDER_QUERIES):
        response = api.post("/v1/orders", order_body, key="K")

    assert response.status_code == 201


def test_a_replay_costs_two_queries_and_writes_nothing(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    api.post("/v1/orders", order_body, key="K")

    with django_assert_num_queries(REPLAY_QUERIES) as captured:
        response = api.post("/v1/orders", order_body, key="K")

    assert response["Idempotent-Replayed"] == "true"
    assert all(q["sql"].startswith("SELECT") for q in captured.captured_queries)


def test_a_conflict_costs_two_queries(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    api.post("/v1/orders", order_body, key="K")
    order_body["currency"] = "USD"

    with django_assert_num_queries(REPLAY_QUERIES):
        response = api.post("/v1/orders", order_body, key="K")

    assert response.status_code == 409


# Authenticate; look the key up; BEGIN; bound the waits; claim; savepoint;
# savepoint (the service's block); lock the order; savepoint; insert the
# payment; release; insert the operation; release; release; store the
# response; COMMIT.
START_PAYMENT_QUERIES = 16
# A replay of an asynchronous command also reads its operation's status.
ASYNC_REPLAY_QUERIES = 3


def test_starting_a_payment_costs_a_fixed_number_of_queries(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    order = body_of(api.post("/v1/orders", order_body, key="o"))["order"]
    body = payment_body(order)

    with django_assert_num_queries(START_PAYMENT_QUERIES):
        first = api.post("/v1/payments", body, key="p")
    with django_assert_num_queries(ASYNC_REPLAY_QUERIES):
        replay = api.post("/v1/payments", body, key="p")

    assert first.status_code == replay.status_code == 202
