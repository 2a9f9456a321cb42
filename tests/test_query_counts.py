"""What a command costs the database, pinned (the README quotes these numbers)."""

import pytest

# Transactional, so the command runs in a real transaction as in production
# (inside a test transaction its outer block would add a savepoint pair).
pytestmark = pytest.mark.django_db(transaction=True)

# Authenticate; look the key up; BEGIN; bound the waits; claim the key;
# savepoint; read the catalog; savepoint (the service's own block); insert
# the order and its lines; release; read the lines back for the answer;
# release; store the response; COMMIT.
CREATE_ORDER_QUERIES = 15
# Authenticate and look the key up: a replay takes no lock and writes nothing.
REPLAY_QUERIES = 2


def test_creating_an_order_costs_a_fixed_number_of_queries(
    api, order_body, django_assert_num_queries
):
    order_body["items"] = [{"sku": "ABC", "qty": 1}, {"sku": "XYZ", "qty": 2}]

    with django_assert_num_queries(CREATE_ORDER_QUERIES):
        response = api.post("/v1/orders", order_body, key="K")

    assert response.status_code == 201


def test_a_replay_costs_two_queries_and_writes_nothing(api, order_body, django_assert_num_queries):
    api.post("/v1/orders", order_body, key="K")

    with django_assert_num_queries(REPLAY_QUERIES) as captured:
        response = api.post("/v1/orders", order_body, key="K")

    assert response["Idempotent-Replayed"] == "true"
    assert all(q["sql"].startswith("SELECT") for q in captured.captured_queries)


def test_a_conflict_costs_two_queries(api, order_body, django_assert_num_queries):
    api.post("/v1/orders", order_body, key="K")
    order_body["currency"] = "USD"

    with django_assert_num_queries(REPLAY_QUERIES):
        response = api.post("/v1/orders", order_body, key="K")

    assert response.status_code == 409
