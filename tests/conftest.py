import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import Client

from accounts.services import create_api_client


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.exit(
            "The suite runs on PostgreSQL: run `make test`, or set DATABASE_URL=postgres://…",
            returncode=2,
        )


@dataclass
class Api:
    """A client authenticated as one principal, speaking JSON."""

    client: Client
    token: str
    principal: Any

    def headers(self, key: str | None = None, **extra: str) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token}", **extra}
        if key is not None:
            headers["Idempotency-Key"] = key
        return headers

    def post(self, path: str, body: Any = None, *, key: str | None = None, **headers: str) -> Any:
        raw = body if isinstance(body, str | bytes) else json.dumps(body)
        return self.client.post(
            path,
            data=raw if body is not None else "",
            content_type="application/json",
            headers=self.headers(key, **headers),
        )

    def get(self, path: str, **headers: str) -> Any:
        return self.client.get(path, headers=self.headers(**headers))


def wait_until(condition, timeout: float = 10.0) -> None:
    """Poll a condition the database exposes no event for."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def backend_waiting_on_a_lock() -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


@pytest.fixture
def catalog(db: None) -> None:
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115


@pytest.fixture
def api(db: None, catalog: None) -> Api:
    issued = create_api_client(tenant_slug="acme", name="alice")
    return Api(client=Client(), token=issued.token, principal=issued.principal)


@pytest.fixture
def other_api(db: None, catalog: None) -> Api:
    """Another principal of the same tenant."""
    issued = create_api_client(tenant_slug="acme", name="bob")
    return Api(client=Client(), token=issued.token, principal=issued.principal)


@pytest.fixture
def stranger_api(db: None, catalog: None) -> Api:
    """A principal of another tenant."""
    issued = create_api_client(tenant_slug="globex", name="carol")
    return Api(client=Client(), token=issued.token, principal=issued.principal)


ORDER = {"customerId": "cust-1", "items": [{"sku": "ABC", "qty": 2}], "currency": "RUB"}


@pytest.fixture
def order_body() -> dict[str, Any]:
    return json.loads(json.dumps(ORDER))


def run_concurrently(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(i)`` in ``n`` threads released at the same instant.

    Each thread has its own database connection (Django's are per thread),
    so these are real concurrent transactions; each closes its connection.
    """
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return results


@contextmanager
def running_worker() -> Iterator[None]:
    """A real Celery worker, in a thread of this process, on the real broker.

    Tasks are published after commit and travel through the broker, as in
    production: nothing runs eagerly.
    """
    from celery.contrib.testing.worker import start_worker

    from config.celery import app

    with start_worker(
        app, pool="solo", perform_ping_check=False, loglevel="WARNING", shutdown_timeout=30
    ):
        yield
    connections.close_all()


@pytest.fixture
def broker(transactional_db: None, settings: Any) -> None:
    """An empty queue, and retries quick enough for tests."""
    from config.celery import app

    settings.PAYMENT_RETRY_BACKOFF = 0.05
    app.control.purge()


@pytest.fixture
def worker(broker: None) -> Iterator[None]:
    with running_worker():
        yield


@pytest.fixture
def finished_operation() -> Iterator[Callable[[str], Any]]:
    """Wait for an operation to leave ``processing``, woken by each task the worker ends."""
    from celery.signals import task_postrun

    from operations.models import Operation

    ended = threading.Condition()

    def on_task_end(**kwargs: Any) -> None:
        with ended:
            ended.notify_all()

    task_postrun.connect(on_task_end, weak=False)

    def wait(operation_id: str, timeout: float = 30.0) -> Operation:
        deadline = time.monotonic() + timeout
        with ended:
            while (operation := Operation.objects.get(pk=operation_id)).is_finished is False:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"operation {operation_id} still processing"
                # The timeout only guards against a notification sent between
                # the read above and this wait.
                ended.wait(timeout=min(remaining, 0.5))
        return operation

    yield wait
    task_postrun.disconnect(on_task_end)
