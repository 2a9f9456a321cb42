"""A database that is down or fails under a request: 503 ServiceUnavailable, never a 500.

The database really fails in each test: the request's connection points at
a port nobody listens on (connection refused), or its backend is
terminated by another connection while it waits on a lock (connection
lost), or the lock wait outlasts the command's ``lock_timeout``. Other
database errors are bugs, and stay ``500 InternalError``.
"""

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.http import HttpRequest, HttpResponse
from django.test import Client
from psycopg import sql
from pytest_django import Settings

from accounts.models import ApiToken
from api.errors import DATABASE_RETRY_AFTER_SECONDS
from idempotency.models import IdempotencyKey
from orders.models import Order, Product
from tests.support.faults import FaultProxy, Mode
from tests.support.http import Api, ClientResponse, problem

# What a body must never show of the failure behind it.
INTERNALS = ("Traceback", "Error", "psycopg", "postgres", "django", "File ", "line ", "pid")


def assert_service_unavailable(response: ClientResponse | HttpResponse) -> None:
    assert response.status_code == 503
    body = problem(response)
    assert body["error"] == "ServiceUnavailable"
    assert body["type"] == "urn:order-service:problem:ServiceUnavailable"
    assert body["title"] == "Service unavailable"
    assert body["status"] == 503
    assert body["traceId"] == response["X-Request-ID"]
    assert "Retry-After" in body["message"]
    assert response["Retry-After"] == str(DATABASE_RETRY_AFTER_SECONDS)
    text = response.content.decode()
    for internal in INTERNALS:
        assert internal not in text, internal


def libpq_params() -> dict[str, Any]:
    """How to open another connection to the test database."""
    settings_dict = connections["default"].settings_dict
    params = {
        "dbname": settings_dict["NAME"],
        "user": settings_dict["USER"],
        "password": settings_dict["PASSWORD"],
        "host": settings_dict["HOST"],
        "port": settings_dict["PORT"],
    }
    return {name: value for name, value in params.items() if value}


@contextmanager
def unreachable_database() -> Iterator[None]:
    """Requests in this block connect to a port that refuses connections.

    The port is bound and not listening, so nothing else can listen on it
    meanwhile. The connection is closed on the way in and out, so that the
    requests inside connect anew, and so do those after.
    """
    default = connections["default"]
    saved = {name: default.settings_dict[name] for name in ("HOST", "PORT")}
    with socket.socket() as refusing:
        refusing.bind(("127.0.0.1", 0))
        default.close()
        default.settings_dict.update(HOST="127.0.0.1", PORT=str(refusing.getsockname()[1]))
        try:
            yield
        finally:
            default.settings_dict.update(saved)
            default.close()


@contextmanager
def database_hosts(*upstreams: tuple[str, int], connect_timeout: int) -> Iterator[None]:
    """Requests in this block connect through this list of hosts, as a multi-host URL names them.

    libpq tries them in order, each for at most ``connect_timeout`` seconds
    (its least is 2), and keeps the first that takes writes
    (``target_session_attrs=read-write``, as docs/DEPLOYING.md's URL says).
    """
    default = connections["default"]
    saved = {name: default.settings_dict[name] for name in ("HOST", "PORT", "OPTIONS")}
    default.close()
    default.settings_dict.update(
        HOST=",".join(host for host, _ in upstreams),
        PORT=",".join(str(port) for _, port in upstreams),
        OPTIONS={
            **saved["OPTIONS"],
            "connect_timeout": connect_timeout,
            "target_session_attrs": "read-write",
        },
    )
    try:
        yield
    finally:
        default.settings_dict.update(saved)
        default.close()


def the_database() -> tuple[str, int]:
    settings_dict = connections["default"].settings_dict
    return settings_dict["HOST"], int(settings_dict["PORT"])


@contextmanager
def table_locked(table: str, *, terminate_waiter: bool) -> Iterator[list[int]]:
    """Hold ``table`` locked from another connection for the block.

    With ``terminate_waiter``, the first backend of the test database that
    waits for the lock (the request's) has its connection terminated, as a
    database restart or failover would; the list names the backends
    terminated. Without it, the request waits until its own lock timeout.
    """
    terminated: list[int] = []
    with psycopg.connect(**libpq_params()) as holder:
        holder_pid = holder.info.backend_pid
        holder.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(table))
        )

        def terminate() -> None:
            with psycopg.connect(**libpq_params(), autocommit=True) as watcher:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and not terminated:
                    row = watcher.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock' AND pid <> %s",
                        [holder_pid],
                    ).fetchone()
                    if row is not None:
                        watcher.execute("SELECT pg_terminate_backend(%s)", row)
                        terminated.append(row[0])
                    time.sleep(0.005)
                if not terminated:
                    # Never leave the request waiting forever: the test fails instead.
                    watcher.execute("SELECT pg_terminate_backend(%s)", [holder_pid])

        watch = threading.Thread(target=terminate) if terminate_waiter else None
        if watch is not None:
            watch.start()
        try:
            yield terminated
        finally:
            if watch is not None:
                watch.join()
            if not holder.closed:
                holder.rollback()


def table_of(model: type[Any]) -> str:
    return str(model._meta.db_table)


# --- Unreachable: connection refused ---------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_command_is_503_while_the_database_is_unreachable_and_its_retry_executes_once(
    api: Api, order_body: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with unreachable_database(), caplog.at_level(logging.WARNING):
        failed = api.post("/v1/orders", order_body, key="K")

    assert_service_unavailable(failed)
    assert not IdempotencyKey.objects.exists()
    retried = api.post("/v1/orders", order_body, key="K")
    replayed = api.post("/v1/orders", order_body, key="K")
    assert retried.status_code == 201
    assert not retried.has_header("Idempotent-Replayed")
    assert replayed["Idempotent-Replayed"] == "true"
    assert replayed.content == retried.content
    assert Order.objects.count() == 1
    # Once, as a warning with the exception for operators; never an error.
    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.name, r.levelname) for r in failures] == [("api.errors", "WARNING")]
    assert failures[0].exc_info is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/v1/orders", "/v1/orders/ord_missing", "/v1/payments/pay_x"])
def test_a_read_is_503_while_the_database_is_unreachable(
    api: Api, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    with unreachable_database(), caplog.at_level(logging.WARNING):
        response = api.get(path)

    assert_service_unavailable(response)
    assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] == ["WARNING"]


@pytest.fixture
def administrator(transactional_db: None) -> Client:
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-unused-1")
    client = Client()
    client.force_login(user)
    return client


def test_an_admin_page_is_503_while_the_database_is_unreachable(
    administrator: Client, caplog: pytest.LogCaptureFixture
) -> None:
    # The page reads the session, then the user, from the database.
    with unreachable_database(), caplog.at_level(logging.WARNING):
        response = administrator.get("/admin/")

    assert_service_unavailable(response)
    assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] == ["WARNING"]


class QueryAfterTheView:
    """A middleware that uses the database after the view, as a session save does."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return response


@pytest.mark.django_db(transaction=True)
def test_a_database_failure_in_a_middleware_is_503_too(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.QueryAfterTheView"]

    with unreachable_database(), caplog.at_level(logging.WARNING):
        # /healthz itself never touches the database.
        response = Client(raise_request_exception=False).get("/healthz")

    assert_service_unavailable(response)
    # Logged once, as a warning: Django does not log it again as an error.
    assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] == ["WARNING"]


# --- A host that answers nothing: connect_timeout --------------------------

# The least connect_timeout libpq applies, so that these tests wait least.
CONNECT_TIMEOUT_S = 2


@pytest.mark.django_db(transaction=True)
def test_a_host_that_answers_nothing_is_passed_over_after_the_connect_timeout(
    api: Api, order_body: dict[str, Any]
) -> None:
    # A host whose machine is gone or cut off: the connection is accepted
    # (as by a route that still answers) and then nothing comes back.
    with (
        FaultProxy(the_database(), mode=Mode.STALL) as silent,
        database_hosts(silent.address, the_database(), connect_timeout=CONNECT_TIMEOUT_S),
    ):
        started = time.monotonic()
        placed = api.post("/v1/orders", order_body, key="K")
        took = time.monotonic() - started

    assert placed.status_code == 201
    assert CONNECT_TIMEOUT_S <= took < CONNECT_TIMEOUT_S + 1.5
    assert Order.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_hosts_that_all_answer_nothing_are_503_after_a_connect_timeout_each(
    api: Api, order_body: dict[str, Any]
) -> None:
    with (
        FaultProxy(the_database(), mode=Mode.STALL) as one,
        FaultProxy(the_database(), mode=Mode.STALL) as other,
        database_hosts(one.address, other.address, connect_timeout=CONNECT_TIMEOUT_S),
    ):
        started = time.monotonic()
        failed = api.post("/v1/orders", order_body, key="K")
        took = time.monotonic() - started

    assert_service_unavailable(failed)
    assert 2 * CONNECT_TIMEOUT_S <= took < 2 * CONNECT_TIMEOUT_S + 1.5
    assert not IdempotencyKey.objects.exists()
    assert api.post("/v1/orders", order_body, key="K").status_code == 201
    assert Order.objects.count() == 1


# --- Lost mid-request: the backend is terminated --------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("terminate", [True, False], ids=["connection-lost", "lock-timeout"])
def test_a_command_the_database_fails_under_is_503_and_its_retry_executes_once(
    api: Api, order_body: dict[str, Any], settings: Settings, terminate: bool
) -> None:
    # The command's lock_timeout; long enough to be terminated first.
    settings.IDEMPOTENCY_WAIT = 10.0 if terminate else 0.2
    # The command reads the catalog after it has claimed its key.
    with table_locked(table_of(Product), terminate_waiter=terminate) as terminated:
        failed = api.post("/v1/orders", order_body, key="K")

    assert len(terminated) == (1 if terminate else 0)
    assert_service_unavailable(failed)
    assert not IdempotencyKey.objects.exists()
    assert not Order.objects.exists()
    retried = api.post("/v1/orders", order_body, key="K")
    replayed = api.post("/v1/orders", order_body, key="K")
    assert retried.status_code == 201
    assert not retried.has_header("Idempotent-Replayed")
    assert replayed.content == retried.content
    assert replayed["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("table", [table_of(ApiToken), table_of(Order)])
def test_a_read_whose_connection_is_lost_is_503(api: Api, table: str) -> None:
    # accounts_apitoken: lost while authenticating; orders_order: in the view.
    with table_locked(table, terminate_waiter=True) as terminated:
        response = api.get("/v1/orders")

    assert len(terminated) == 1
    assert_service_unavailable(response)
    # What Django does at the end of each request, which the test client
    # skips: a connection that failed is checked, and dropped.
    connection.close_if_unusable_or_obsolete()
    assert api.get("/v1/orders").status_code == 200


# --- Other database errors are bugs: 500 ----------------------------------


@pytest.fixture
def every_new_row_refused(db: None) -> Callable[[type[Any]], None]:
    """Make the database refuse every new row of a table (in the test's transaction)."""

    def refuse(model: type[Any]) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"ALTER TABLE {connection.ops.quote_name(table_of(model))}"
                " ADD CONSTRAINT refuses_every_row CHECK (false) NOT VALID"
            )

    return refuse


def test_an_integrity_error_in_a_command_is_a_final_500(
    api: Api,
    order_body: dict[str, Any],
    every_new_row_refused: Callable[[type[Any]], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    every_new_row_refused(Order)

    with caplog.at_level(logging.WARNING):
        first = api.post("/v1/orders", order_body, key="K")
    again = api.post("/v1/orders", order_body, key="K")

    assert first.status_code == 500
    assert problem(first)["error"] == "InternalError"
    assert not first.has_header("Retry-After")
    assert "IntegrityError" not in first.content.decode()
    # A bug: final, stored and replayed, and logged as an error.
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    assert "ERROR" in [r.levelname for r in caplog.records]


def test_an_integrity_error_in_an_admin_page_is_500(
    db: None, every_new_row_refused: Callable[[type[Any]], None]
) -> None:
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-unused-1")
    client = Client(raise_request_exception=False)
    client.force_login(user)
    every_new_row_refused(Product)

    response = client.post(
        "/admin/orders/product/add/",
        {"sku": "NEW", "name": "New", "unit_price": "100", "currency": "RUB"},
    )

    assert response.status_code == 500
    assert problem(response)["error"] == "InternalError"
    assert not response.has_header("Retry-After")
    assert json.loads(response.content)["traceId"] == response["X-Request-ID"]
