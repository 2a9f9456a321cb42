"""The orders endpoints and the conventions of docs/SPECIFICATION.md §2 and §4."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.support.http import Api, body_of

pytestmark = pytest.mark.django_db


def create(api: Api, body: dict[str, Any], key: str = "K") -> Any:
    response = api.post("/v1/orders", body, key=key)
    assert response.status_code == 201, response.content
    return body_of(response)


# --- create ---------------------------------------------------------------------


def test_an_order_is_priced_from_the_catalog(api: Api) -> None:
    body = {
        "customerId": "c-7",
        "items": [{"sku": "ABC", "qty": 2}, {"sku": "XYZ", "qty": 1}],
        "currency": "RUB",
    }

    response = api.post("/v1/orders", body, key="K")

    assert response.status_code == 201
    answer = body_of(response)
    order_id = answer["orderId"]
    assert order_id.startswith("ord_")
    assert answer["status"] == "succeeded"
    assert answer["links"] == {"self": f"/v1/orders/{order_id}"}
    assert response["Location"] == f"/v1/orders/{order_id}"
    order = answer["order"]
    assert order["id"] == order_id
    assert order["customerId"] == "c-7"
    assert order["status"] == "pending"
    assert order["currency"] == "RUB"
    assert order["totalAmount"] == 2 * 1990 + 50000
    assert order["items"] == [
        {"sku": "ABC", "qty": 2, "unitPrice": 1990, "lineTotal": 3980},
        {"sku": "XYZ", "qty": 1, "unitPrice": 50000, "lineTotal": 50000},
    ]
    assert order["payments"] == []
    assert order["links"] == {"self": f"/v1/orders/{order_id}"}
    assert set(order) >= {"createdAt", "updatedAt"}


def test_an_unknown_sku_is_refused(api: Api, order_body: dict[str, Any]) -> None:
    order_body["items"].append({"sku": "NOPE", "qty": 1})

    response = api.post("/v1/orders", order_body, key="K")

    assert response.status_code == 422
    assert body_of(response)["error"] == "UnknownSku"
    assert body_of(response)["details"] == {"unknownSkus": ["NOPE"]}
    assert Order.objects.count() == 0


def test_an_item_priced_in_another_currency_is_refused(
    api: Api, order_body: dict[str, Any]
) -> None:
    order_body["items"].append({"sku": "USD1", "qty": 1})

    response = api.post("/v1/orders", order_body, key="K")

    assert response.status_code == 422
    assert body_of(response)["error"] == "CurrencyMismatch"
    assert Order.objects.count() == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b.pop("customerId"), "customerId"),
        (lambda b: b.update(customerId=42), "customerId"),
        (lambda b: b.update(items=[]), "items"),
        (lambda b: b.update(items=[{"sku": "ABC", "qty": 1}] * 101), "items"),
        (lambda b: b["items"][0].update(qty=0), "items"),
        (lambda b: b["items"][0].update(qty=1001), "items"),
        (lambda b: b["items"][0].update(qty="2"), "items"),
        (lambda b: b["items"][0].update(qty=1.5), "items"),
        (lambda b: b["items"][0].update(qty=True), "items"),
        (lambda b: b.update(currency="rub"), "currency"),
        (lambda b: b.update(curency="RUB"), "curency"),
    ],
    ids=[
        "missing",
        "not-a-string",
        "no-items",
        "too-many-items",
        "qty-zero",
        "qty-too-large",
        "qty-string",
        "qty-fraction",
        "qty-bool",
        "currency-format",
        "unknown-field",
    ],
)
def test_invalid_bodies_are_validation_errors_naming_the_field(
    api: Api, order_body: dict[str, Any], change: Callable[[dict[str, Any]], object], field: str
) -> None:
    change(order_body)

    response = api.post("/v1/orders", order_body, key="K")

    assert response.status_code == 400
    problem = body_of(response)
    assert problem["error"] == "ValidationError"
    assert field in problem["details"]
    assert Order.objects.count() == 0


def test_a_body_that_is_not_an_object_is_a_validation_error(api: Api) -> None:
    response = api.post("/v1/orders", [1, 2], key="K")

    assert response.status_code == 400
    assert body_of(response)["error"] == "ValidationError"


# --- read -------------------------------------------------------------------------


def test_an_order_can_be_read_back(api: Api, order_body: dict[str, Any]) -> None:
    created = create(api, order_body)

    response = api.get(f"/v1/orders/{created['orderId']}")

    assert response.status_code == 200
    assert body_of(response) == created["order"]


def test_orders_are_listed_newest_first_with_cursor_links(
    api: Api, order_body: dict[str, Any]
) -> None:
    ids = [create(api, order_body, key=f"k{i}")["orderId"] for i in range(3)]

    first = api.get("/v1/orders?pageSize=2")
    second = api.get(body_of(first)["next"])

    assert [o["id"] for o in body_of(first)["results"]] == ids[::-1][:2]
    assert body_of(first)["previous"] is None
    assert body_of(first)["next"].startswith("/v1/orders?")
    assert [o["id"] for o in body_of(second)["results"]] == ids[:1]
    assert body_of(second)["next"] is None
    assert body_of(second)["previous"].startswith("/v1/orders?")


def test_another_tenants_order_is_answered_like_a_missing_one(
    api: Api, stranger_api: Api, order_body: dict[str, Any]
) -> None:
    order_id = create(api, order_body)["orderId"]

    theirs = stranger_api.get(f"/v1/orders/{order_id}")
    missing = stranger_api.get("/v1/orders/ord_doesnotexist")
    cancel = stranger_api.post(f"/v1/orders/{order_id}/cancel", {}, key="C")
    listing = stranger_api.get("/v1/orders")

    assert theirs.status_code == missing.status_code == cancel.status_code == 404
    assert body_of(theirs)["error"] == body_of(missing)["error"] == "NotFound"
    assert body_of(listing)["results"] == []
    assert Order.objects.get().status == Order.Status.PENDING


# --- cancel ----------------------------------------------------------------------


def test_a_pending_order_is_cancelled(api: Api, order_body: dict[str, Any]) -> None:
    order_id = create(api, order_body)["orderId"]

    response = api.post(f"/v1/orders/{order_id}/cancel", {"reason": "changed mind"}, key="C")

    assert response.status_code == 200
    answer = body_of(response)
    assert answer["status"] == "succeeded"
    assert answer["orderId"] == order_id
    assert answer["order"]["status"] == "cancelled"
    assert Order.objects.get().cancel_reason == "changed mind"


def test_cancelling_without_a_body_is_allowed(api: Api, order_body: dict[str, Any]) -> None:
    order_id = create(api, order_body)["orderId"]

    response = api.client.generic(
        "POST", f"/v1/orders/{order_id}/cancel", b"", content_type="", headers=api.headers("C")
    )

    assert response.status_code == 200
    assert body_of(response)["order"]["status"] == "cancelled"


def test_cancelling_a_cancelled_order_answers_the_order_whatever_the_key(
    api: Api, order_body: dict[str, Any]
) -> None:
    order_id = create(api, order_body)["orderId"]
    api.post(f"/v1/orders/{order_id}/cancel", {}, key="C1")

    response = api.post(f"/v1/orders/{order_id}/cancel", {}, key="C2")

    assert response.status_code == 200
    assert body_of(response)["order"]["status"] == "cancelled"
    assert not response.has_header("Idempotent-Replayed")


# --- conventions -----------------------------------------------------------------


def test_every_response_carries_a_request_id_echoed_when_sane(api: Api) -> None:
    echoed = api.get("/v1/orders", **{"X-Request-ID": "trace-123"})
    replaced = api.get("/v1/orders", **{"X-Request-ID": "bad id\u00e9"})
    error = api.client.get("/v1/orders")

    assert echoed["X-Request-ID"] == "trace-123"
    assert replaced["X-Request-ID"] not in ("", "bad id\u00e9")
    assert body_of(error)["traceId"] == error["X-Request-ID"]


@pytest.mark.parametrize(
    ("authorization", "expected"),
    [
        (None, "NotAuthenticated"),
        ("Bearer nope", "AuthenticationFailed"),
        ("Basic dXNlcjpwYXNz", "AuthenticationFailed"),
        ("Bearer", "AuthenticationFailed"),
    ],
)
def test_requests_without_a_valid_token_are_refused(
    client: Client, db: None, authorization: str | None, expected: str
) -> None:
    headers = {"Authorization": authorization} if authorization else {}

    response = client.get("/v1/orders", headers=headers)

    assert response.status_code == 401
    assert response["Content-Type"] == "application/problem+json"
    problem = body_of(response)
    assert problem["error"] == expected
    assert problem["status"] == 401
    assert set(problem) >= {"type", "title", "message", "traceId"}


def test_an_unknown_method_is_refused(api: Api) -> None:
    response = api.client.delete("/v1/orders", headers=api.headers("K"))

    assert response.status_code == 405
    assert body_of(response)["error"] == "MethodNotAllowed"


def test_an_unacceptable_media_type_is_refused(api: Api) -> None:
    response = api.get("/v1/orders", Accept="text/html")

    assert response.status_code == 406
    assert body_of(response)["error"] == "NotAcceptable"


def test_a_body_without_a_media_type_is_refused(api: Api, order_body: dict[str, Any]) -> None:
    response = api.client.generic(
        "POST",
        "/v1/orders",
        json.dumps(order_body).encode(),
        content_type="",
        headers=api.headers("K"),
    )

    assert response.status_code == 415
    assert body_of(response)["error"] == "UnsupportedMediaType"
    assert IdempotencyKey.objects.count() == 0


def test_unknown_paths_answer_problem_json(client: Client, db: None) -> None:
    response = client.get("/v1/nothing-here")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert body_of(response)["error"] == "NotFound"


def test_health_endpoints_need_no_authentication(client: Client, db: None) -> None:
    assert client.get("/healthz").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert body_of(ready)["checks"] == {"database": True, "broker": True}


def test_djangos_own_validation_errors_render_as_contract_problems() -> None:
    from django.core.exceptions import ValidationError as DjangoValidationError

    from api.errors import render_exception

    response = render_exception(DjangoValidationError({"customerId": ["Too long."]}))

    assert response.status_code == 400
    assert body_of(response)["error"] == "ValidationError"
    assert body_of(response)["details"] == {"customerId": ["Too long."]}


@pytest.mark.parametrize(
    "path",
    ["/v1/orders/ord%00x", "/v1/payments/%00", "/v1/operations/op_" + "a" * 3000],
)
def test_a_path_id_that_cannot_name_a_resource_is_not_found(api: Api, path: str) -> None:
    response = api.get(path)

    assert response.status_code == 404
    assert body_of(response)["error"] == "NotFound"


def test_cancelling_through_a_malformed_id_stores_no_key(api: Api) -> None:
    response = api.post("/v1/orders/%00/cancel", {}, key="K")

    assert response.status_code == 404
    assert IdempotencyKey.objects.count() == 0


def test_an_unknown_id_without_a_token_is_unauthenticated(client: Client, db: None) -> None:
    response = client.get("/v1/orders/does-not-exist")

    assert response.status_code == 401
    assert body_of(response)["error"] == "NotAuthenticated"
