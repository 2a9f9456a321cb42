"""Rule 11 — Look-up: ``GET /v1/idempotency-keys/{key}`` tells a principal what became of its key.

It shows the key's first request (method and path), when it was used and
expires, the status it earned and links to what it made, read from the
stored answer; never the request's values. Anything but one of the
caller's own completed, unexpired keys is ``404 NotFound``.
"""

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from idempotency.models import IdempotencyKey, StoredAnswer
from idempotency.serializers import answer_links
from orders.models import Order
from tests.support import probes
from tests.support.concurrency import run_concurrently
from tests.support.http import Api, ClientResponse, body_of, payment_body, problem

pytestmark = pytest.mark.django_db

# Authenticate the token; read the key (one indexed SELECT). No transaction:
# a read opens none.
LOOKUP_QUERIES = 2


def lookup(api: Api, key: str) -> ClientResponse:
    """Look ``key`` up as a client does: percent-encoded into one path segment."""
    return api.get(f"/v1/idempotency-keys/{quote(key, safe='')}")


def assert_not_found(response: ClientResponse) -> None:
    assert response.status_code == 404
    assert problem(response)["error"] == "NotFound"


def without_trace(response: ClientResponse) -> dict[str, Any]:
    body: dict[str, Any] = problem(response)
    del body["traceId"]
    return body


# --- What a key shows ----------------------------------------------------------


def test_an_order_key_shows_its_request_its_status_and_the_order(
    api: Api, order_body: dict[str, Any]
) -> None:
    placed = api.post("/v1/orders", order_body, key="order-1")
    order_id = body_of(placed)["orderId"]
    record = IdempotencyKey.objects.get()

    response = lookup(api, "order-1")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    answer = body_of(response)
    assert answer | {"createdAt": None, "expiresAt": None} == {
        "key": "order-1",
        "method": "POST",
        "path": "/v1/orders",
        "status": 201,
        "createdAt": None,
        "expiresAt": None,
        "links": {
            "self": "/v1/idempotency-keys/order-1",
            "location": f"/v1/orders/{order_id}",
            "result": f"/v1/orders/{order_id}",
        },
    }
    assert datetime.fromisoformat(answer["createdAt"]) == record.created_at
    assert datetime.fromisoformat(answer["expiresAt"]) == record.expires_at
    assert api.get(answer["links"]["location"]).status_code == 200


def test_a_payment_key_shows_its_202_the_operation_to_poll_and_the_payment(
    api: Api, order_body: dict[str, Any]
) -> None:
    order = body_of(api.post("/v1/orders", order_body, key="order-1"))["order"]
    accepted = body_of(api.post("/v1/payments", payment_body(order), key="pay-1"))
    operation = f"/v1/operations/{accepted['operationId']}"

    response = lookup(api, "pay-1")

    answer = body_of(response)
    assert response.status_code == 200
    assert (answer["method"], answer["path"], answer["status"]) == ("POST", "/v1/payments", 202)
    assert answer["links"] == {
        "self": "/v1/idempotency-keys/pay-1",
        "location": operation,
        "result": f"/v1/payments/{accepted['paymentId']}",
        "operation": operation,
    }


def test_a_stored_validation_error_shows_its_400_and_leads_nowhere(
    api: Api, order_body: dict[str, Any]
) -> None:
    order_body["items"][0]["qty"] = 0
    refused = api.post("/v1/orders", order_body, key="invalid-1")

    response = lookup(api, "invalid-1")

    assert refused.status_code == 400
    assert response.status_code == 200
    answer = body_of(response)
    assert (answer["method"], answer["path"], answer["status"]) == ("POST", "/v1/orders", 400)
    assert answer["links"] == {
        "self": "/v1/idempotency-keys/invalid-1",
        "location": None,
        "result": None,
    }


def test_the_answer_never_holds_the_requests_values_nor_the_stored_answer(
    api: Api, order_body: dict[str, Any]
) -> None:
    order_body["customerId"] = "cust-secret-7431"
    placed = api.post("/v1/orders", order_body, key="K")
    record = IdempotencyKey.objects.get()

    response = lookup(api, "K")

    text = response.content.decode()
    assert response.status_code == 200
    assert "cust-secret-7431" not in text
    assert record.fingerprint not in text
    assert not [digest for digest in record.field_digests.values() if digest in text]
    assert set(body_of(response)) == {
        "key",
        "method",
        "path",
        "status",
        "createdAt",
        "expiresAt",
        "links",
    }
    # What the look-up leaves out was in the stored answer.
    assert body_of(placed)["order"]["customerId"] == "cust-secret-7431"


def test_a_refusal_that_is_not_stored_leaves_the_key_as_it_was(
    api: Api, order_body: dict[str, Any]
) -> None:
    api.post("/v1/orders", order_body, key="K")
    before = body_of(lookup(api, "K"))

    conflict = api.post("/v1/orders", {**order_body, "currency": "USD"}, key="K")

    assert conflict.status_code == 409
    assert body_of(lookup(api, "K")) == before


def test_a_look_up_executes_replays_and_extends_nothing(
    api: Api, order_body: dict[str, Any]
) -> None:
    api.post("/v1/orders", order_body, key="K")
    before = IdempotencyKey.objects.values().get()

    for _ in range(3):
        lookup(api, "K")

    assert IdempotencyKey.objects.values().get() == before
    assert Order.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "headers", "links"),
    [
        (
            b'{"links": {"self": "/v1/things/1", "next": "/v1/things/2", "location": "/v1/x",'
            b' "result": "/v1/y", "count": 3, "nested": {"a": "/v1/z"}}}',
            {"Location": "/v1/operations/op_1"},
            {"location": "/v1/operations/op_1", "result": "/v1/things/1", "next": "/v1/things/2"},
        ),
        (b'{"links": ["/v1/things/1"]}', {}, {"location": None, "result": None}),
        (b'["/v1/things/1"]', {}, {"location": None, "result": None}),
        (b"not json", {"Location": "/v1/things/1"}, {"location": "/v1/things/1", "result": None}),
    ],
    ids=["links-and-location", "links-not-an-object", "not-an-object", "not-json"],
)
def test_links_are_read_from_the_stored_answer_alone(
    body: bytes, headers: dict[str, str], links: dict[str, str | None]
) -> None:
    # The look-up's own names win over a stored link of the same name, and
    # only string links are shown, whatever a command may answer.
    record = IdempotencyKey(key="K")
    record.answer = StoredAnswer(status=201, body=body, headers=headers)

    assert answer_links(record) == links


# --- Not found ------------------------------------------------------------------


def test_an_unknown_key_is_not_found(api: Api) -> None:
    response = lookup(api, "never-used")

    assert_not_found(response)
    assert response["Content-Type"] == "application/problem+json"
    assert problem(response)["traceId"] == response["X-Request-ID"]


def test_another_principals_key_is_not_found_in_the_same_tenant_or_another(
    api: Api, other_api: Api, stranger_api: Api, order_body: dict[str, Any]
) -> None:
    api.post("/v1/orders", order_body, key="mine")

    colleague = lookup(other_api, "mine")
    stranger = lookup(stranger_api, "mine")
    unknown = lookup(api, "never-used")

    assert_not_found(colleague)
    assert_not_found(stranger)
    # As absent as a key nobody used: the same answer but for its traceId.
    assert without_trace(colleague) == without_trace(stranger) == without_trace(unknown)


def test_each_principal_sees_its_own_key_of_a_shared_name(
    api: Api, other_api: Api, stranger_api: Api, order_body: dict[str, Any]
) -> None:
    mine = body_of(api.post("/v1/orders", order_body, key="shared"))["orderId"]
    theirs = body_of(other_api.post("/v1/orders", order_body, key="shared"))["orderId"]
    api.post("/v1/orders", order_body, key="only-mine")

    seen = {
        name: body_of(lookup(client, "shared"))["links"]["result"]
        for name, client in (("alice", api), ("bob", other_api))
    }

    assert seen == {"alice": f"/v1/orders/{mine}", "bob": f"/v1/orders/{theirs}"}
    assert_not_found(lookup(stranger_api, "shared"))
    assert_not_found(lookup(other_api, "only-mine"))


def test_an_expired_key_is_not_found_before_it_is_purged(
    api: Api, order_body: dict[str, Any]
) -> None:
    api.post("/v1/orders", order_body, key="old")
    api.post("/v1/orders", order_body, key="soon")
    IdempotencyKey.objects.filter(key="old").update(expires_at=timezone.now())
    IdempotencyKey.objects.filter(key="soon").update(
        expires_at=timezone.now() + timedelta(minutes=1)
    )

    expired = lookup(api, "old")
    expiring = lookup(api, "soon")

    assert_not_found(expired)
    assert IdempotencyKey.objects.filter(key="old").exists()
    assert expiring.status_code == 200


@pytest.mark.urls("tests.support.probes")
@pytest.mark.django_db(transaction=True)
def test_a_key_whose_first_request_is_still_running_is_not_found_until_it_ends(
    api: Api, slow_command: None
) -> None:
    def request(i: int) -> ClientResponse:
        if i == 0:
            return api.post("/v1/probes/slow", {}, key="running")
        assert probes.slow_command_started.wait(timeout=10)
        try:
            # Answered at once: the look-up waits for no lock.
            return lookup(api, "running")
        finally:
            probes.slow_command_release.set()

    first, during = run_concurrently(2, request)
    after = lookup(api, "running")

    assert_not_found(during)
    assert first.status_code == 201
    assert after.status_code == 200
    assert body_of(after)["status"] == 201


@pytest.mark.parametrize(
    "segment",
    ["a%20b", "x" * 256, "%D0%BA%D0%BB%D1%8E%D1%87", "nul%00byte", "tab%09here"],
    ids=["space", "too-long", "not-ascii", "nul", "tab"],
)
def test_a_segment_that_cannot_be_a_key_is_not_found_without_a_look_up(
    api: Api, segment: str, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(1):  # the authentication alone
        response = api.get(f"/v1/idempotency-keys/{segment}")

    assert_not_found(response)


# --- Keys of every visible character ----------------------------------------------


@pytest.mark.parametrize(
    ("key", "self_link"),
    [
        ("a/b", "a%2Fb"),
        ("trailing/", "trailing%2F"),
        ("/leading//double", "%2Fleading%2F%2Fdouble"),
        ("100%", "100%25"),
        ("%2F-not-a-slash", "%252F-not-a-slash"),
        ('say-"hi"', "say-%22hi%22"),
        ("q?x=1#frag", "q%3Fx%3D1%23frag"),
        (
            "!$&'()*+;=:@[]{}|\\^`<>",
            "%21%24%26%27%28%29%2A%2B%3B%3D%3A%40%5B%5D%7B%7D%7C%5C%5E%60%3C%3E",
        ),
        (".", "%2E"),
        ("..", "%2E%2E"),
        ("...", "..."),
        ("x" * 255, "x" * 255),
    ],
)
def test_a_key_of_any_visible_characters_round_trips(
    api: Api, order_body: dict[str, Any], key: str, self_link: str
) -> None:
    api.post("/v1/orders", order_body, key=key)

    response = lookup(api, key)

    assert response.status_code == 200
    answer = body_of(response)
    assert answer["key"] == key
    assert answer["links"]["self"] == f"/v1/idempotency-keys/{self_link}"
    assert body_of(api.get(answer["links"]["self"])) == answer


def test_the_path_names_the_key_itself_not_the_headers_quoted_form(
    api: Api, order_body: dict[str, Any]
) -> None:
    # The structured-field form names the key inside the quotes, and only it
    # can send a key that starts with a quote.
    api.post("/v1/orders", order_body, key='"7f2c"')
    api.post("/v1/orders", order_body, key='"\\"quoted"')

    plain = lookup(api, "7f2c")
    quoted = lookup(api, '"7f2c"')
    leading_quote = lookup(api, '"quoted')

    assert body_of(plain)["key"] == "7f2c"
    assert_not_found(quoted)
    assert body_of(leading_quote)["links"]["self"] == "/v1/idempotency-keys/%22quoted"


# --- Authentication and cost ------------------------------------------------------


@pytest.mark.parametrize("segment", ["K", "a%20b"], ids=["key", "not-a-key"])
def test_the_look_up_needs_a_token_before_anything_else(
    api: Api, order_body: dict[str, Any], segment: str
) -> None:
    api.post("/v1/orders", order_body, key="K")
    anonymous = Client()

    missing = anonymous.get(f"/v1/idempotency-keys/{segment}")
    wrong = anonymous.get(
        f"/v1/idempotency-keys/{segment}", headers={"Authorization": "Bearer osk_wrong"}
    )

    assert missing.status_code == wrong.status_code == 401
    assert problem(missing)["error"] == "NotAuthenticated"
    assert problem(wrong)["error"] == "AuthenticationFailed"
    assert missing["WWW-Authenticate"] == 'Bearer realm="order-service"'


def test_a_look_up_costs_two_queries(
    api: Api, order_body: dict[str, Any], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    order = body_of(api.post("/v1/orders", order_body, key="o"))["order"]
    api.post("/v1/payments", payment_body(order), key="p")

    statuses = []
    for key in ("o", "p", "never-used"):
        with django_assert_num_queries(LOOKUP_QUERIES):
            statuses.append(lookup(api, key).status_code)

    assert statuses == [200, 200, 404]
