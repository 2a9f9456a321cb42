"""ETags on reads, ``If-None-Match`` and ``If-Match`` (docs/SPECIFICATION.md §4).

A read of one order, payment or operation carries a strong ETag that
changes whenever its body does; ``cancel`` and ``PUT`` of an existing id
accept ``If-Match`` and refuse a stale tag with ``412 PreconditionFailed``,
an answer stored under the key like any other.
"""

import re
from collections.abc import Callable
from typing import Any

import pytest

from orders.models import Order
from tests.support.concurrency import run_concurrently
from tests.support.http import Api, ClientResponse, body_of, payment_body, problem

pytestmark = pytest.mark.django_db

STRONG_TAG = re.compile(r'"[0-9a-f]{32}"')


@pytest.fixture
def order(api: Api, order_body: dict[str, Any]) -> dict[str, Any]:
    placed: dict[str, Any] = body_of(api.post("/v1/orders", order_body, key="place"))["order"]
    return placed


def path(order: dict[str, Any]) -> str:
    return f"/v1/orders/{order['id']}"


def tag_of(api: Api, order: dict[str, Any]) -> str:
    return api.get(path(order))["ETag"]


def cancel(api: Api, order: dict[str, Any], key: str, **headers: str) -> ClientResponse:
    return api.post(f"{path(order)}/cancel", key=key, **headers)


# --- ETag and If-None-Match on reads ------------------------------------------------


def test_a_read_carries_a_strong_tag_that_stays_while_nothing_changes(
    api: Api, order: dict[str, Any]
) -> None:
    first, second = api.get(path(order)), api.get(path(order))

    assert STRONG_TAG.fullmatch(first["ETag"])
    assert first["ETag"] == second["ETag"]


def test_the_tag_changes_whenever_the_representation_does(api: Api, order: dict[str, Any]) -> None:
    placed = tag_of(api, order)
    api.post("/v1/payments", payment_body(order, "pm_card_ok"), key="pay")
    # The order itself was not written; its list of payments changed.
    with_payment = tag_of(api, order)
    Order.objects.filter(id=order["id"]).update(status=Order.Status.CANCELLED)

    assert len({placed, with_payment, tag_of(api, order)}) == 3


@pytest.mark.parametrize(
    "if_none_match", ["{tag}", "W/{tag}", '"other", {tag}', "*"], ids=["tag", "weak", "list", "any"]
)
def test_a_matching_if_none_match_is_not_modified(
    api: Api, order: dict[str, Any], if_none_match: str
) -> None:
    tag = tag_of(api, order)

    response = api.get(path(order), **{"If-None-Match": if_none_match.format(tag=tag)})

    assert response.status_code == 304
    assert response.content == b""
    assert response["ETag"] == tag
    assert response.has_header("X-Request-ID")


def test_a_stale_if_none_match_gets_the_representation(api: Api, order: dict[str, Any]) -> None:
    stale = tag_of(api, order)
    cancel(api, order, key="cancel")

    response = api.get(path(order), **{"If-None-Match": stale})

    assert response.status_code == 200
    assert body_of(response)["status"] == "cancelled"
    assert response["ETag"] != stale


def test_payments_and_operations_carry_tags_too(api: Api, order: dict[str, Any]) -> None:
    accepted = body_of(api.post("/v1/payments", payment_body(order), key="pay"))

    for read in (accepted["links"]["self"], accepted["links"]["operation"]):
        tag = api.get(read)["ETag"]
        not_modified = api.get(read, **{"If-None-Match": tag})

        assert STRONG_TAG.fullmatch(tag)
        assert not_modified.status_code == 304
    # A client polling with its tag is still told when to ask again.
    assert not_modified["Retry-After"]


def test_an_error_carries_no_tag(api: Api) -> None:
    response = api.get("/v1/orders/ord_missing", **{"If-None-Match": "*"})

    assert response.status_code == 404
    assert not response.has_header("ETag")


# --- If-Match on cancel ---------------------------------------------------------------


def test_a_cancel_with_the_current_tag_cancels(api: Api, order: dict[str, Any]) -> None:
    response = cancel(api, order, key="cancel", **{"If-Match": tag_of(api, order)})

    assert response.status_code == 200
    assert body_of(response)["order"]["status"] == "cancelled"


def test_a_cancel_with_any_tag_needs_only_the_order(api: Api, order: dict[str, Any]) -> None:
    assert cancel(api, order, key="cancel", **{"If-Match": "*"}).status_code == 200


@pytest.mark.parametrize(
    "stale",
    [
        lambda tag: '"0123456789abcdef0123456789abcdef"',
        # If-Match compares strongly: a weak tag never matches.
        lambda tag: f"W/{tag}",
        # Not a tag at all: it cannot match either.
        lambda tag: tag.strip('"'),
        lambda tag: "",
    ],
    ids=["another", "weak", "unquoted", "empty"],
)
def test_a_cancel_with_another_tag_is_refused_and_changes_nothing(
    api: Api, order: dict[str, Any], stale: Callable[[str], str]
) -> None:
    tag = tag_of(api, order)
    header = stale(tag)

    response = cancel(api, order, key="cancel", **{"If-Match": header})

    assert response.status_code == 412
    assert problem(response)["error"] == "PreconditionFailed"
    assert Order.objects.get(id=order["id"]).status == Order.Status.PENDING
    assert tag_of(api, order) == tag


def test_a_stale_tag_is_refused_after_the_order_changed(api: Api, order: dict[str, Any]) -> None:
    read_before_payment = tag_of(api, order)
    api.post("/v1/payments", payment_body(order, "pm_card_declined"), key="pay")

    response = cancel(api, order, key="cancel", **{"If-Match": read_before_payment})

    assert response.status_code == 412


def test_the_refusal_is_stored_and_replayed_under_its_key(api: Api, order: dict[str, Any]) -> None:
    first = cancel(api, order, key="cancel", **{"If-Match": '"stale"'})

    # The same key: the first answer stands, whatever this retry sends.
    again = cancel(api, order, key="cancel", **{"If-Match": tag_of(api, order)})

    assert again.status_code == 412
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"


def test_a_retry_replays_its_answer_though_the_tag_has_changed_since(
    api: Api, order: dict[str, Any]
) -> None:
    tag = tag_of(api, order)
    first = cancel(api, order, key="cancel", **{"If-Match": tag})

    retry = cancel(api, order, key="cancel", **{"If-Match": tag})
    new_key = cancel(api, order, key="another", **{"If-Match": tag})

    assert tag_of(api, order) != tag
    assert retry.status_code == 200
    assert retry.content == first.content
    assert retry["Idempotent-Replayed"] == "true"
    assert new_key.status_code == 412


def test_a_tag_that_matches_lets_the_domain_decide(api: Api, order: dict[str, Any]) -> None:
    api.post("/v1/payments", payment_body(order), key="pay")

    response = cancel(api, order, key="cancel", **{"If-Match": tag_of(api, order)})

    assert response.status_code == 409
    assert problem(response)["error"] == "OrderStateConflict"


def test_a_missing_order_is_not_found_whatever_the_tag(api: Api) -> None:
    response = api.post("/v1/orders/ord_missing/cancel", key="cancel", **{"If-Match": "*"})

    assert response.status_code == 404


@pytest.mark.django_db(transaction=True)
def test_of_concurrent_cancels_with_one_tag_one_wins_and_the_rest_are_refused(
    api: Api, order: dict[str, Any]
) -> None:
    tag = tag_of(api, order)

    responses: list[ClientResponse] = run_concurrently(
        12, lambda i: cancel(api, order, key=f"cancel-{i}", **{"If-Match": tag})
    )

    assert sorted(r.status_code for r in responses) == [200] + [412] * 11
    assert Order.objects.get(id=order["id"]).status == Order.Status.CANCELLED


@pytest.mark.django_db(transaction=True)
def test_without_a_tag_concurrent_cancels_all_succeed(api: Api, order: dict[str, Any]) -> None:
    # The contrast: cancelling is idempotent in the domain, so without
    # If-Match every copy is told the order is cancelled.
    responses: list[ClientResponse] = run_concurrently(
        12, lambda i: cancel(api, order, key=f"cancel-{i}")
    )

    assert {r.status_code for r in responses} == {200}


# --- If-Match on PUT ----------------------------------------------------------------

ID = "ord_tagged"


def test_a_put_with_the_current_tag_answers_the_equivalent_order(
    api: Api, order_body: dict[str, Any]
) -> None:
    api.put(f"/v1/orders/{ID}", order_body, key="K1")
    tag = api.get(f"/v1/orders/{ID}")["ETag"]

    current = api.put(f"/v1/orders/{ID}", order_body, key="K2", **{"If-Match": tag})
    any_tag = api.put(f"/v1/orders/{ID}", order_body, key="K3", **{"If-Match": "*"})
    different = api.put(
        f"/v1/orders/{ID}", {**order_body, "customerId": "x"}, key="K4", **{"If-Match": tag}
    )

    assert current.status_code == any_tag.status_code == 200
    assert problem(different)["error"] == "OrderAlreadyExists"


def test_a_put_with_a_stale_tag_is_refused(api: Api, order_body: dict[str, Any]) -> None:
    api.put(f"/v1/orders/{ID}", order_body, key="K1")
    tag = api.get(f"/v1/orders/{ID}")["ETag"]
    api.post(f"/v1/orders/{ID}/cancel", key="cancel")

    response = api.put(f"/v1/orders/{ID}", order_body, key="K2", **{"If-Match": tag})

    assert response.status_code == 412


@pytest.mark.parametrize("if_match", ["*", '"0123456789abcdef0123456789abcdef"'])
def test_a_put_with_if_match_never_places_an_order(
    api: Api, order_body: dict[str, Any], if_match: str
) -> None:
    response = api.put(f"/v1/orders/{ID}", order_body, key="K", **{"If-Match": if_match})

    assert response.status_code == 412
    assert not Order.objects.exists()
