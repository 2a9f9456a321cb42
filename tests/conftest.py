"""Fixtures shared by the whole suite; the helpers they use are in tests/support/."""

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from pytest_django import Settings

from accounts.services import create_api_client
from operations.models import Operation
from tests.support.concurrency import FinishedOperation, running_worker
from tests.support.http import ORDER, Api


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.exit(
            "The suite runs on PostgreSQL: run `make test`, or set DATABASE_URL=postgres://…",
            returncode=2,
        )


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


@pytest.fixture
def order_body() -> dict[str, Any]:
    """A copy of ``ORDER`` of the test's own, to change."""
    return json.loads(json.dumps(ORDER))


@pytest.fixture
def broker(transactional_db: None, settings: Settings) -> None:
    """An empty queue, and retries quick enough for tests."""
    from config.celery import app

    settings.PAYMENT_RETRY_BACKOFF = 0.05
    app.control.purge()


@pytest.fixture
def worker(broker: None) -> Iterator[None]:
    with running_worker():
        yield


@pytest.fixture
def finished_operation() -> Iterator[FinishedOperation]:
    """Wait for an operation to leave ``processing``, woken by each task the worker ends."""
    from celery.signals import task_postrun

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
