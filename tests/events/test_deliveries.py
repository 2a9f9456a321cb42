"""Deliveries: signed as Standard Webhooks says, the same bytes every attempt, retried, bounded.

A real worker delivers to a real HTTP server in the test (tests/support/receiver.py);
the signatures are checked with the ``standardwebhooks`` reference.
"""

import socket
from typing import Any

import pytest
import standardwebhooks
from celery.signals import task_postrun
from django.db import connection
from pytest_django import Settings

from events.models import Delivery
from operations.models import Operation
from tests.support.concurrency import FinishedOperation
from tests.support.http import Api, body_of
from tests.support.receiver import always, receiving

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def quick(settings: Settings) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    settings.WEBHOOK_RETRY_BACKOFF = 0.05
    settings.WEBHOOK_TIMEOUT = 5.0


def subscribe(api: Api, url: str, key: str = "S", types: Any = None) -> dict[str, Any]:
    response = api.post(
        "/v1/webhook-endpoints", {"url": url, "eventTypes": types or ["*"]}, key=key
    )
    assert response.status_code == 201, response.content
    endpoint: dict[str, Any] = body_of(response)
    return endpoint


def place(api: Api, key: str = "O") -> dict[str, Any]:
    body = {"customerId": "c", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"}
    order: dict[str, Any] = body_of(api.post("/v1/orders", body, key=key))["order"]
    return order


def delivery_operation() -> Operation:
    return Operation.objects.get(kind="webhook.deliver")


def deliveries(api: Api, endpoint: dict[str, Any]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = body_of(api.get(endpoint["links"]["deliveries"]))["results"]
    return results


def test_an_event_is_posted_signed_and_verifies_with_the_reference(
    api: Api, quick: None, worker: None, finished_operation: FinishedOperation
) -> None:
    with receiving() as receiver:
        endpoint = subscribe(api, receiver.url)
        order = place(api)
        (request,) = receiver.wait_for(1)
        finished_operation(delivery_operation().id)

    event = body_of(api.get("/v1/events"))["results"][0]
    verified = standardwebhooks.Webhook(endpoint["secret"]).verify(request.body, request.headers)
    assert verified == event
    assert verified["data"]["id"] == order["id"]
    assert request.headers["webhook-id"] == event["id"]
    assert request.headers["content-type"] == "application/json"
    assert request.path == "/hooks"
    (delivery,) = deliveries(api, endpoint)
    assert delivery == {
        "eventId": event["id"],
        "type": "order.created",
        "status": "succeeded",
        "attempts": 1,
        "lastStatusCode": 200,
        "lastError": None,
        "nextAttemptAt": None,
        "createdAt": delivery["createdAt"],
    }


def test_a_failed_attempt_is_retried_with_the_same_bytes_and_id(
    api: Api, quick: None, worker: None, finished_operation: FinishedOperation
) -> None:
    # 500, then a 302 (a redirect is not followed), then 200.
    with receiving(lambda n: (500, 302, 200)[n]) as receiver:
        endpoint = subscribe(api, receiver.url)
        place(api)
        requests = receiver.wait_for(3)
        operation = finished_operation(delivery_operation().id)

    assert operation.status == "succeeded"
    assert len({r.body for r in requests}) == 1
    assert len({r.headers["webhook-id"] for r in requests}) == 1
    for request in requests:
        standardwebhooks.Webhook(endpoint["secret"]).verify(request.body, request.headers)
    (delivery,) = deliveries(api, endpoint)
    assert (delivery["status"], delivery["attempts"], delivery["lastStatusCode"]) == (
        "succeeded",
        3,
        200,
    )


def test_an_endpoint_that_keeps_failing_ends_the_delivery_failed_after_its_budget(
    api: Api, quick: None, settings: Settings, worker: None, finished_operation: FinishedOperation
) -> None:
    settings.WEBHOOK_MAX_ATTEMPTS = 3
    with receiving(always(503)) as receiver:
        endpoint = subscribe(api, receiver.url)
        place(api)
        operation = finished_operation(delivery_operation().id)

    assert len(receiver.received) == 3
    assert (operation.status, operation.error_code) == ("failed", "WebhookUndelivered")
    (delivery,) = deliveries(api, endpoint)
    assert delivery["status"] == "failed"
    assert delivery["attempts"] == 3
    assert delivery["lastStatusCode"] == 503
    assert delivery["lastError"] == "The endpoint answered 503."
    assert delivery["nextAttemptAt"] is None


def test_an_endpoint_that_cannot_be_reached_records_why(
    api: Api, quick: None, settings: Settings, worker: None, finished_operation: FinishedOperation
) -> None:
    settings.WEBHOOK_MAX_ATTEMPTS = 2
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    endpoint = subscribe(api, f"http://127.0.0.1:{port}/hooks")
    place(api)
    finished_operation(delivery_operation().id)

    (delivery,) = deliveries(api, endpoint)
    assert (delivery["status"], delivery["lastStatusCode"]) == ("failed", None)
    assert delivery["lastError"] == "The endpoint refused the connection."


@pytest.fixture
def rebinding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``rebound.example`` resolves to the address last appended: DNS, the edge of the world."""
    answers = ["192.0.32.10"]
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebound.example":
            return real(answers[-1], port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr("events.addresses.socket.getaddrinfo", getaddrinfo)
    return answers


def test_a_name_that_points_inside_by_delivery_time_is_not_called(
    api: Api,
    quick: None,
    settings: Settings,
    rebinding: list[str],
    worker: None,
    finished_operation: FinishedOperation,
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    settings.WEBHOOK_MAX_ATTEMPTS = 1
    with receiving() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        endpoint = subscribe(api, f"http://rebound.example:{port}/hooks")
        rebinding.append("127.0.0.1")
        place(api)
        finished_operation(delivery_operation().id)

    assert receiver.received == []
    (delivery,) = deliveries(api, endpoint)
    assert delivery["status"] == "failed"
    assert "127.0.0.1, which is not a public address" in delivery["lastError"]


def _close_connection(**kwargs: Any) -> None:
    connection.close()


def test_a_slow_endpoint_never_holds_up_another(
    api: Api, quick: None, broker: None, settings: Settings
) -> None:
    from celery.contrib.testing.worker import start_worker

    from config.celery import app

    settings.WEBHOOK_TIMEOUT = 10.0
    # Each of the pool's threads has a connection of its own: closed as it
    # ends each task, or the test database could not be dropped.
    task_postrun.connect(_close_connection, weak=False)
    with (
        receiving(delay=0) as slow,
        receiving() as fast,
        start_worker(
            app, pool="threads", concurrency=3, perform_ping_check=False, loglevel="WARNING"
        ),
    ):
        slow.delay = 2.0
        subscribe(api, slow.url, key="slow")
        fast_endpoint = subscribe(api, fast.url, key="fast")
        for n in range(4):
            place(api, key=f"O{n}")

        fast.wait_for(4, timeout=20)
        # The slow receiver takes one delivery at a time, 2 s each.
        assert len(slow.received) <= 2
        slow.wait_for(4, timeout=60)
    task_postrun.disconnect(_close_connection)

    assert all(d["status"] == "succeeded" for d in deliveries(api, fast_endpoint))
    assert Delivery.objects.filter(status="succeeded").count() == 8


def test_a_deliverys_operation_is_the_services_own_and_no_client_reads_it(
    api: Api, settings: Settings
) -> None:
    """§4 rule 8: GET /v1/operations/{id} shows the work a client's command started.

    A delivery is the service's own: no answer gives its operation's id,
    its endpoint's deliveries tell how it went, and it has no result a
    client could follow (its ``resultId`` is a delivery, which has no URL).
    """
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    subscribe(api, "http://127.0.0.1:9/hooks")
    place(api)

    response = api.get(f"/v1/operations/{delivery_operation().id}")
    schema = api.client.get("/v1/schema/", {"format": "json"}).json()
    operation = schema["components"]["schemas"]["OperationOutput"]["properties"]

    assert response.status_code == 404
    assert body_of(response)["error"] == "NotFound"
    assert schema["components"]["schemas"][operation["kind"]["$ref"].split("/")[-1]]["enum"] == [
        "payment.charge",
        "order.refund",
    ]
