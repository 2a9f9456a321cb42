"""The feed: one event per effect, in the effect's transaction, as its resource read then.

docs/SPECIFICATION.md §4 rules 11 and 12. The events of commands are checked in
the test's transaction; those of a worker's charge and refund with a real
worker (tests/events/test_feed_from_the_worker.py).
"""

from typing import Any

import pytest
from django.db import IntegrityError

from events.models import Event
from events.services import record_event
from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.support.http import Api, body_of, problem

pytestmark = pytest.mark.django_db


def events_of(api: Api, query: str = "") -> list[dict[str, Any]]:
    response = api.get(f"/v1/events{query}")
    assert response.status_code == 200, response.content
    results: list[dict[str, Any]] = body_of(response)["results"]
    return results


def place(api: Api, body: dict[str, Any], key: str) -> dict[str, Any]:
    response = api.post("/v1/orders", body, key=key)
    assert response.status_code == 201, response.content
    order: dict[str, Any] = body_of(response)["order"]
    return order


def test_placing_an_order_records_its_event_with_the_order_as_its_read_shows_it(
    api: Api, order_body: dict[str, Any]
) -> None:
    order = place(api, order_body, key="K")

    (event,) = events_of(api)
    assert event["type"] == "order.created"
    assert event["id"].startswith("evt_")
    assert event["data"] == body_of(api.get(f"/v1/orders/{order['id']}"))
    assert event["links"] == {
        "self": f"/v1/events/{event['id']}",
        "resource": f"/v1/orders/{order['id']}",
    }
    assert body_of(api.get(f"/v1/events/{event['id']}")) == event


def test_a_replayed_or_repeated_command_records_no_second_event(
    api: Api, order_body: dict[str, Any]
) -> None:
    order = place(api, order_body, key="K")
    assert api.post("/v1/orders", order_body, key="K")["Idempotent-Replayed"] == "true"
    put = "/v1/orders/ord_chosen"
    assert api.put(put, order_body, key="P1").status_code == 201
    # The same order under the same id, by a new key: found, not placed again.
    assert api.put(put, order_body, key="P2").status_code == 200
    cancel = f"/v1/orders/{order['id']}/cancel"
    assert api.post(cancel, {}, key="C1").status_code == 200
    assert api.post(cancel, {}, key="C2").status_code == 200

    assert sorted((e["type"], e["links"]["resource"]) for e in events_of(api)) == sorted(
        [
            ("order.cancelled", f"/v1/orders/{order['id']}"),
            ("order.created", "/v1/orders/ord_chosen"),
            ("order.created", f"/v1/orders/{order['id']}"),
        ]
    )
    cancelled = events_of(api, "?type=order.cancelled")[0]
    assert cancelled["data"]["status"] == "cancelled"
    assert cancelled["data"] == body_of(api.get(f"/v1/orders/{order['id']}"))


def test_the_database_holds_one_event_per_effect(api: Api, order_body: dict[str, Any]) -> None:
    order = place(api, order_body, key="K")

    with pytest.raises(IntegrityError):
        record_event(
            tenant=api.principal.tenant,
            event_type="order.created",
            resource=f"/v1/orders/{order['id']}",
            data={},
        )


def test_a_command_that_fails_leaves_neither_its_effect_nor_its_event(
    api: Api, order_body: dict[str, Any]
) -> None:
    from tests.idempotency.test_stored_answers import refuse_rows

    # The order and its lines are written, then the event is refused: the
    # command's one transaction rolls back with all of it.
    refuse_rows(Event, "false")

    response = api.post("/v1/orders", order_body, key="K")

    assert response.status_code == 500
    assert not Order.objects.exists()
    assert not Event.objects.exists()
    assert IdempotencyKey.objects.get().answer.status == 500


def test_the_feed_is_oldest_first_and_resumes_after_an_event(
    api: Api, order_body: dict[str, Any]
) -> None:
    placed = [place(api, order_body, key=f"K{n}")["id"] for n in range(5)]

    feed = events_of(api)
    assert [e["links"]["resource"] for e in feed] == [f"/v1/orders/{o}" for o in placed]
    after = events_of(api, f"?after={feed[1]['id']}")
    assert after == feed[2:]
    assert events_of(api, f"?after={feed[-1]['id']}") == []

    first = body_of(api.get("/v1/events?pageSize=2"))
    assert first["results"] == feed[:2]
    second = body_of(api.get(first["next"]))
    assert second["results"] == feed[2:4]


def test_a_read_that_started_after_an_event_goes_on_once_that_event_is_purged(
    api: Api, order_body: dict[str, Any]
) -> None:
    placed = [place(api, order_body, key=f"K{n}")["id"] for n in range(5)]
    feed = events_of(api)

    first = body_of(api.get(f"/v1/events?after={feed[0]['id']}&pageSize=2"))
    Event.objects.filter(id=feed[0]["id"]).delete()  # as the purge does, past the retention
    second = api.get(first["next"])

    assert "after=" not in first["next"]
    assert second.status_code == 200, second.content
    assert [e["links"]["resource"] for e in body_of(second)["results"]] == [
        f"/v1/orders/{o}" for o in placed[3:5]
    ]


def test_the_feed_filters_by_type(api: Api, order_body: dict[str, Any]) -> None:
    order = place(api, order_body, key="K")
    api.post(f"/v1/orders/{order['id']}/cancel", {}, key="C")

    assert [e["type"] for e in events_of(api, "?type=order.cancelled")] == ["order.cancelled"]
    assert [e["type"] for e in events_of(api, "?type=payment.refunded")] == []


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("?type=order.exploded", "type"),
        ("?after=evt_unknown", "after"),
        ("?pageSize=0", "pageSize"),
    ],
)
def test_a_feed_query_it_cannot_answer_is_a_validation_error(
    api: Api, query: str, parameter: str
) -> None:
    response = api.get(f"/v1/events{query}")

    assert response.status_code == 400
    assert problem(response)["error"] == "ValidationError"
    assert list(problem(response)["details"]) == [parameter]


def test_another_tenants_events_are_invisible(
    api: Api, stranger_api: Api, order_body: dict[str, Any]
) -> None:
    place(api, order_body, key="K")
    (event,) = events_of(api)

    assert events_of(stranger_api) == []
    assert stranger_api.get(f"/v1/events/{event['id']}").status_code == 404
    assert stranger_api.get(f"/v1/events?after={event['id']}").status_code == 400
