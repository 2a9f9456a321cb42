"""How a body is framed never changes what a command receives, and never burns a key.

Many HTTP clients stream a body with ``Transfer-Encoding: chunked`` and no
``Content-Length``. Django would read such a body as empty, run the command
on nothing and store that answer, after which the client's retry of the
same request with the same key would conflict. A body is read whole (up to
the 1 MiB limit) or refused before the command starts, and a refusal stores
nothing, so the retry executes.

These tests talk to gunicorn in its own process, as ``make run`` starts
it: only a real server takes chunked bodies apart (Django's test client
cannot send one).
"""

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.support.http import ORDER, Api
from tests.support.live import LiveService, serve, suite_database_env

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def service(django_db_setup: None) -> Iterator[LiveService]:
    with serve(suite_database_env(), web_workers=2) as live:
        yield live


def chunks(body: bytes, size: int = 7) -> Iterator[bytes]:
    """The body in small pieces: requests sends a generator chunked."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def post(
    service: LiveService,
    api: Api,
    path: str,
    data: str | bytes | Iterator[bytes],
    key: str,
    **headers: str,
) -> requests.Response:
    return requests.post(
        service.url(path),
        data=data,
        headers={**api.headers(key), "Content-Type": "application/json", **headers},
        timeout=30,
    )


def test_a_chunked_command_executes_with_its_body_and_its_retry_replays(
    service: LiveService, api: Api
) -> None:
    body = json.dumps(ORDER).encode()

    chunked = post(service, api, "/v1/orders", chunks(body), "chunked-1")
    retried = post(service, api, "/v1/orders", body, "chunked-1")

    assert chunked.request.headers["Transfer-Encoding"] == "chunked"
    assert "Content-Length" not in chunked.request.headers
    assert chunked.status_code == 201, chunked.text
    assert chunked.json()["order"]["customerId"] == ORDER["customerId"]
    assert retried.status_code == 201
    assert retried.headers["Idempotent-Replayed"] == "true"
    assert retried.content == chunked.content
    assert Order.objects.count() == 1


def test_a_chunked_cancel_keeps_its_reason(service: LiveService, api: Api) -> None:
    order = post(service, api, "/v1/orders", json.dumps(ORDER), "to-cancel").json()["order"]
    reason = json.dumps({"reason": "Ordered by mistake."}).encode()

    cancelled = post(service, api, f"/v1/orders/{order['id']}/cancel", chunks(reason), "c-1")

    assert cancelled.status_code == 200, cancelled.text
    assert Order.objects.get(id=order["id"]).cancel_reason == "Ordered by mistake."


def test_a_chunked_body_over_the_limit_is_refused_and_the_key_stays_free(
    service: LiveService, api: Api
) -> None:
    too_large = b'{"customerId": "' + b"x" * (2 * 1024 * 1024) + b'"}'

    refused = post(service, api, "/v1/orders", chunks(too_large, 64 * 1024), "large-1")
    retried = post(service, api, "/v1/orders", json.dumps(ORDER), "large-1")

    assert refused.status_code == 413
    assert refused.headers["Content-Type"] == "application/problem+json"
    assert refused.json()["error"] == "PayloadTooLarge"
    assert retried.status_code == 201
    assert "Idempotent-Replayed" not in retried.headers


def test_a_body_shorter_than_its_content_length_is_refused_and_the_key_stays_free(
    service: LiveService, api: Api
) -> None:
    body = json.dumps({"reason": "half"}).encode()
    order = post(service, api, "/v1/orders", json.dumps(ORDER), "to-cut").json()["order"]
    path = f"/v1/orders/{order['id']}/cancel"

    status, answer = send_then_close(service, api, path, body, declared=len(body) + 20, key="cut")
    retried = post(service, api, path, body, "cut")

    assert status == 400
    assert answer["error"] == "MalformedJson"
    assert answer["message"] == (
        f"The body ended after {len(body)} of {len(body) + 20} bytes its Content-Length announced."
    )
    assert retried.status_code == 200
    assert "Idempotent-Replayed" not in retried.headers
    assert Order.objects.get(id=order["id"]).cancel_reason == "half"
    assert IdempotencyKey.objects.filter(key="cut").count() == 1


def send_then_close(
    service: LiveService, api: Api, path: str, body: bytes, *, declared: int, key: str
) -> tuple[int, dict[str, Any]]:
    """Send ``body`` under a larger ``Content-Length``, then end the sending side."""
    host, port = service.address
    connection = http.client.HTTPConnection(host, port, timeout=30)
    connection.putrequest("POST", path)
    for name, value in {
        **api.headers(key),
        "Content-Type": "application/json",
        "Content-Length": str(declared),
    }.items():
        connection.putheader(name, value)
    connection.endheaders(body)
    assert connection.sock is not None
    connection.sock.shutdown(socket.SHUT_WR)
    response = connection.getresponse()
    answer: dict[str, Any] = json.loads(response.read())
    connection.close()
    return response.status, answer
