"""Sockets that connect and stall do not keep anyone else waiting.

Three kinds of stalled client, none needing a token to be harmful: one that
connects and sends nothing, one that sends half a header block, and one
that sends a whole command's headers and half its body. While they hold
their connections open, /healthz and a real command (POST /v1/orders) must
each answer within a second:

- behind nginx (docker-compose.yml), with more of each kind than gunicorn
  has threads in all, which nginx holds without passing anything on;
- against gunicorn alone as config/gunicorn.py configures it (what
  ``make run`` serves), with a few of each, which its threads absorb.

With the sync workers this replaced, each stalled socket held a whole
worker process, and two were enough to stop ``make run`` answering at all.
"""

import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import pytest
import requests

from tests.support.edge import serve_behind_nginx
from tests.support.http import ORDER, Api
from tests.support.live import LiveService, serve, suite_database_env

WEB_WORKERS = 2
# config/gunicorn.py's default WEB_THREADS.
THREADS_PER_WORKER = 8
ANSWER_WITHIN = 1.0


def _connect(service: LiveService, sent: bytes) -> socket.socket:
    sock = socket.create_connection(service.address, timeout=5)
    if sent:
        sock.sendall(sent)
    return sock


def _half_headers() -> bytes:
    return b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def _half_body(token: str) -> bytes:
    body = json.dumps(ORDER).encode()
    headers = (
        "POST /v1/orders HTTP/1.1\r\n"
        "Host: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\n"
        f"Idempotency-Key: stalled-{uuid.uuid4().hex}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    ).encode()
    return headers + body[: len(body) // 2]


@contextmanager
def stalled_clients(
    service: LiveService, token: str, per_kind: int
) -> Iterator[list[socket.socket]]:
    """``per_kind`` idle, half-header and half-body sockets, open until exit."""
    with ExitStack() as stack:
        sockets = []
        for sent in [b""] * per_kind + [_half_headers()] * per_kind:
            sockets.append(stack.enter_context(_connect(service, sent)))
        for _ in range(per_kind):
            sockets.append(stack.enter_context(_connect(service, _half_body(token))))
        yield sockets


def still_waiting(sock: socket.socket) -> bool:
    """The server keeps the connection open and has answered nothing on it."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)
    # Closed, or answered.
    return False


def timed(call: Callable[[], requests.Response]) -> tuple[float, requests.Response]:
    started = time.perf_counter()
    try:
        response = call()
    except requests.Timeout:
        pytest.fail("no answer within 5 s")
    return time.perf_counter() - started, response


def probe(service: LiveService, token: str) -> tuple[float, float]:
    """Seconds /healthz and a first execution of POST /v1/orders take."""
    healthz_seconds, healthz = timed(lambda: requests.get(service.url("/healthz"), timeout=5))
    command_seconds, command = timed(
        lambda: requests.post(
            service.url("/v1/orders"),
            data=json.dumps(ORDER),
            headers={
                "Authorization": f"Bearer {token}",
                "Idempotency-Key": uuid.uuid4().hex,
                "Content-Type": "application/json",
            },
            timeout=5,
        )
    )
    assert healthz.status_code == 200
    assert command.status_code == 201, command.text
    return healthz_seconds, command_seconds


@pytest.fixture(scope="module")
def behind_nginx(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveService]:
    with serve_behind_nginx(
        suite_database_env(), tmp_path_factory.mktemp("nginx"), web_workers=WEB_WORKERS
    ) as (edge, _app):
        yield edge


@pytest.fixture(scope="module")
def gunicorn_alone(django_db_setup: None) -> Iterator[LiveService]:
    with serve(suite_database_env(), web_workers=WEB_WORKERS) as service:
        yield service


@pytest.mark.django_db(transaction=True)
def test_behind_nginx_more_stalled_clients_than_gunicorn_has_threads_change_nothing(
    behind_nginx: LiveService, api: Api
) -> None:
    # Each kind alone twice over what gunicorn could ever hold.
    per_kind = 2 * WEB_WORKERS * THREADS_PER_WORKER

    with stalled_clients(behind_nginx, api.token, per_kind) as sockets:
        healthz_seconds, command_seconds = probe(behind_nginx, api.token)
        assert all(still_waiting(sock) for sock in sockets)

    assert healthz_seconds < ANSWER_WITHIN
    assert command_seconds < ANSWER_WITHIN


@pytest.mark.django_db(transaction=True)
def test_gunicorn_alone_keeps_answering_beside_a_few_stalled_clients(
    gunicorn_alone: LiveService, api: Api
) -> None:
    # Two of each: more stalled sockets than worker processes, fewer than the
    # threads of one worker (the kernel may hand them all to one).
    with stalled_clients(gunicorn_alone, api.token, per_kind=2) as sockets:
        healthz_seconds, command_seconds = probe(gunicorn_alone, api.token)
        assert all(still_waiting(sock) for sock in sockets)

    assert healthz_seconds < ANSWER_WITHIN
    assert command_seconds < ANSWER_WITHIN
