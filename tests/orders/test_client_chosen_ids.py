"""``PUT /v1/orders/{orderId}``: an order under an id the client chose (docs/SPECIFICATION.md §4).

The id names the intent beside the key: the key makes a retry of one
request safe, the id makes any request for that order safe, under any key.
"""

import json
from typing import Any

import pytest
from pytest_django import DjangoAssertNumQueries

from idempotency.models import IdempotencyKey
from orders.models import Order, Product
from tests.support.concurrency import run_concurrently
from tests.support.http import Api, ClientResponse, body_of, payment_body, problem

pytestmark = pytest.mark.django_db

ID = "ord_spring-sale_0042"
PATH = f"/v1/orders/{ID}"


def put(api: Api, body: dict[str, Any], key: str, path: str = PATH, **headers: str) -> Any:
    return api.put(path, body, key=key, **headers)


# --- Placing ----------------------------------------------------------------------


def test_a_put_places_the_order_under_the_chosen_id(api: Api, order_body: dict[str, Any]) -> None:
    response = put(api, order_body, key="K")

    assert response.status_code == 201
    answer = body_of(response)
    assert answer["orderId"] == answer["order"]["id"] == ID
    assert answer["status"] == "succeeded"
    assert answer["links"] == {"self": PATH}
    assert response["Location"] == PATH
    assert answer["order"]["totalAmount"] == 3980
    assert body_of(api.get(PATH))["id"] == ID


def test_a_retry_under_the_same_key_replays_the_first_answer(
    api: Api, order_body: dict[str, Any]
) -> None:
    first = put(api, order_body, key="K")

    again = put(api, order_body, key="K")

    assert again.status_code == 201
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


def test_an_equivalent_put_under_a_new_key_answers_the_order_and_places_nothing(
    api: Api, order_body: dict[str, Any]
) -> None:
    first = body_of(put(api, order_body, key="K1"))
    # Spelled differently: the same order.
    respelled = json.dumps(
        {"currency": "RUB", "items": [{"qty": 2, "sku": "ABC"}], "customerId": "cust-1"}
    )

    again = api.put(PATH, respelled, key="K2")

    assert again.status_code == 200
    assert body_of(again) == first
    assert not again.has_header("Idempotent-Replayed")
    assert not again.has_header("Location")
    assert Order.objects.count() == 1
    assert IdempotencyKey.objects.count() == 2


def test_the_equivalent_order_is_answered_as_it_is_now(
    api: Api, order_body: dict[str, Any]
) -> None:
    put(api, order_body, key="K1")
    api.post(f"{PATH}/cancel", key="cancel")
    # A price change since does not make the same request another order.
    Product.objects.filter(sku="ABC").update(unit_price=9999)

    again = put(api, order_body, key="K2")

    assert again.status_code == 200
    order = body_of(again)["order"]
    assert order["status"] == "cancelled"
    assert order["totalAmount"] == 3980


@pytest.mark.parametrize(
    ("change", "mismatch"),
    [
        ({"customerId": "cust-2"}, ["/customerId"]),
        ({"items": [{"sku": "ABC", "qty": 3}]}, ["/items/0/qty"]),
        ({"items": [{"sku": "XYZ", "qty": 2}]}, ["/items/0/sku"]),
        ({"items": [{"sku": "ABC", "qty": 2}, {"sku": "XYZ", "qty": 1}]}, ["/items/1"]),
        ({"currency": "USD", "items": [{"sku": "USD1", "qty": 2}]}, ["/currency", "/items/0/sku"]),
        # The id is taken: existence is decided before the catalog is read.
        ({"items": [{"sku": "NOPE", "qty": 2}]}, ["/items/0/sku"]),
    ],
)
def test_a_different_order_under_a_taken_id_is_a_conflict_naming_what_differs(
    api: Api, order_body: dict[str, Any], change: dict[str, Any], mismatch: list[str]
) -> None:
    put(api, order_body, key="K1")

    response = put(api, {**order_body, **change}, key="K2")

    assert response.status_code == 409
    refusal = problem(response)
    assert refusal["error"] == "OrderAlreadyExists"
    assert refusal["details"] == {"mismatch": mismatch}
    # Pointers, never values.
    assert "cust-2" not in response.content.decode()
    assert Order.objects.count() == 1


def test_the_refusal_is_stored_and_replayed_under_its_key(
    api: Api, order_body: dict[str, Any]
) -> None:
    put(api, order_body, key="K1")
    first = put(api, {**order_body, "customerId": "cust-2"}, key="K2")

    again = put(api, {**order_body, "customerId": "cust-2"}, key="K2")

    assert again.status_code == 409
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"


def test_the_key_is_checked_before_the_id(api: Api, order_body: dict[str, Any]) -> None:
    put(api, order_body, key="K")

    response = put(api, {**order_body, "customerId": "cust-2"}, key="K")

    assert response.status_code == 409
    assert problem(response)["error"] == "IdempotencyKeyConflict"


def test_a_put_is_a_command_that_needs_a_key(api: Api, order_body: dict[str, Any]) -> None:
    response = api.put(PATH, order_body)

    assert response.status_code == 400
    assert problem(response)["error"] == "IdempotencyKeyRequired"
    assert not Order.objects.exists()


def test_a_new_id_is_priced_from_the_catalog_like_a_post(
    api: Api, order_body: dict[str, Any]
) -> None:
    response = put(api, {**order_body, "items": [{"sku": "NOPE", "qty": 1}]}, key="K")

    assert response.status_code == 422
    assert problem(response)["error"] == "UnknownSku"
    assert not Order.objects.exists()


# --- Which ids a client may choose -------------------------------------------------


@pytest.mark.parametrize(
    "order_id",
    ["ord_a", "ord_" + "z" * 64, "ord_A-b_9", "ord_-", "ord__", "ord_3k9x0c2m5q8w1e4r7t6y0u2"],
)
def test_every_id_of_the_pattern_may_be_chosen(
    api: Api, order_body: dict[str, Any], order_id: str
) -> None:
    response = put(api, order_body, key="K", path=f"/v1/orders/{order_id}")

    assert response.status_code == 201, response.content
    assert body_of(response)["orderId"] == order_id
    assert api.get(f"/v1/orders/{order_id}").status_code == 200


@pytest.mark.parametrize(
    "segment",
    [
        "ord_",
        "abc",
        "ORD_abc",
        "pay_abc",
        "ord_" + "z" * 65,
        "ord_a.b",
        "ord_a~b",
        "ord_a%20b",
        "ord_a%00b",
        "ord_%C3%BC",
        "ord_a%2Fb",
        "ord_" + "z" * 5000,
    ],
)
def test_any_other_id_is_a_validation_error_that_changes_nothing(
    api: Api, order_body: dict[str, Any], segment: str
) -> None:
    response = put(api, order_body, key="K", path=f"/v1/orders/{segment}")

    assert response.status_code in (400, 404)
    if "%2F" not in segment:  # a slash ends the segment: another route
        assert response.status_code == 400
        refusal = problem(response)
        assert refusal["error"] == "ValidationError"
        assert "path" in refusal["message"]
        assert list(refusal["details"]) == ["orderId"]
    assert not Order.objects.exists()
    # Refused before the command starts, like a malformed key: nothing stored.
    assert not IdempotencyKey.objects.exists()


@pytest.mark.parametrize("segment", ["abc", "ord_a%00b", "ord_" + "z" * 65, "ord_%C3%BC"])
def test_reading_an_id_no_order_can_have_is_a_plain_not_found(api: Api, segment: str) -> None:
    response = api.get(f"/v1/orders/{segment}")

    assert response.status_code == 404
    assert problem(response)["error"] == "NotFound"


def test_the_longest_id_can_be_paid(api: Api, order_body: dict[str, Any]) -> None:
    longest = "ord_" + "z" * 64
    order = body_of(put(api, order_body, key="K", path=f"/v1/orders/{longest}"))["order"]

    accepted = api.post("/v1/payments", payment_body(order), key="pay")

    assert accepted.status_code == 202
    assert body_of(api.get(body_of(accepted)["links"]["self"]))["orderId"] == longest


# --- Per tenant -------------------------------------------------------------------


def test_ids_are_per_tenant(api: Api, stranger_api: Api, order_body: dict[str, Any]) -> None:
    ours = put(api, order_body, key="K")

    theirs = put(stranger_api, {**order_body, "customerId": "globex-1"}, key="K")

    assert ours.status_code == theirs.status_code == 201
    assert body_of(api.get(PATH))["customerId"] == "cust-1"
    assert body_of(stranger_api.get(PATH))["customerId"] == "globex-1"
    assert Order.objects.filter(id=ID).count() == 2


def test_another_principal_of_the_tenant_shares_the_id(
    api: Api, other_api: Api, order_body: dict[str, Any]
) -> None:
    put(api, order_body, key="K")

    response = put(other_api, order_body, key="K")

    assert response.status_code == 200
    assert Order.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_chosen_id_pays_and_cancels_in_its_own_tenant_only(
    api: Api, stranger_api: Api, order_body: dict[str, Any], worker: None, finished_operation: Any
) -> None:
    orders = {}
    for name, client in (("ours", api), ("theirs", stranger_api)):
        orders[name] = body_of(put(client, order_body, key="K"))["order"]
        paid = body_of(client.post("/v1/payments", payment_body(orders[name]), key="pay"))
        assert finished_operation(paid["operationId"]).status == "succeeded"

    refund = body_of(api.post(f"{PATH}/cancel", key="cancel"))
    refunded = finished_operation(refund["operationId"])

    assert refunded.status == "succeeded"
    assert body_of(api.get(PATH))["status"] == "cancelled"
    assert body_of(stranger_api.get(PATH))["status"] == "paid"
    # The same id's refund in another tenant is another refund.
    theirs = body_of(stranger_api.post(f"{PATH}/cancel", key="cancel"))
    assert finished_operation(theirs["operationId"]).status == "succeeded"
    assert body_of(stranger_api.get(PATH))["status"] == "cancelled"


# --- Concurrency --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_storm_of_puts_of_one_id_under_different_keys_places_one_order(
    api: Api, order_body: dict[str, Any]
) -> None:
    responses: list[ClientResponse] = run_concurrently(
        16, lambda i: put(api, order_body, key=f"storm-{i}")
    )

    assert sorted(r.status_code for r in responses) == [200] * 15 + [201]
    assert len({json.dumps(body_of(r), sort_keys=True) for r in responses}) == 1
    assert Order.objects.count() == 1
    assert IdempotencyKey.objects.count() == 16


@pytest.mark.django_db(transaction=True)
def test_a_storm_of_two_different_orders_for_one_id_places_one_of_them(
    api: Api, order_body: dict[str, Any]
) -> None:
    bodies = [order_body, {**order_body, "customerId": "cust-2"}]

    responses: list[tuple[int, ClientResponse]] = run_concurrently(
        16, lambda i: (i % 2, put(api, bodies[i % 2], key=f"storm-{i}"))
    )

    placed = Order.objects.get()
    winner = 0 if placed.customer_id == "cust-1" else 1
    for body, response in responses:
        if body == winner:
            assert response.status_code in (200, 201)
        else:
            assert response.status_code == 409
            assert problem(response)["details"] == {"mismatch": ["/customerId"]}
    assert sum(r.status_code == 201 for _, r in responses) == 1


# --- Cost ---------------------------------------------------------------------------

# Authenticate; look for the key's answer (none); BEGIN; claim; look the id
# up; SAVEPOINT; read the catalog; insert the order; insert its lines;
# insert its order.created event; read the tenant's webhook endpoints;
# RELEASE; store the response; COMMIT. The savepoint lets a PUT that loses
# the race for the id go on to answer the winner's order.
PUT_NEW_ORDER_QUERIES = 14
# Authenticate; look for the key's answer; BEGIN; claim; look the id up,
# with its lines and payments (three queries); store the response; COMMIT.
PUT_EXISTING_ORDER_QUERIES = 9


@pytest.mark.django_db(transaction=True)
def test_a_put_costs_a_fixed_number_of_queries(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(PUT_NEW_ORDER_QUERIES):
        created = put(api, order_body, key="K1")
    with django_assert_num_queries(PUT_EXISTING_ORDER_QUERIES):
        found = put(api, order_body, key="K2")

    assert (created.status_code, found.status_code) == (201, 200)
