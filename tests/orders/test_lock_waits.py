"""A command that waits too long for an order's row lock is a retryable 503, not a hang or a 500.

``POST /v1/orders/{id}/cancel`` and ``POST /v1/payments`` lock the order's
row first (orders/locks.py ``lock_order``), and so does the worker
that records a charge or a refund. Each command's transaction bounds its
lock waits by ``IDEMPOTENCY_WAIT`` (``lock_timeout``): a wait that outlasts
it ends the transaction, so nothing is stored and the client is told to
retry (``503 ServiceUnavailable`` with ``Retry-After``); a lock released
within the bound is simply waited for. Here another connection holds the
row, as a worker finishing a charge would.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from django.db import connection
from pytest_django import Settings

from idempotency.models import IdempotencyKey
from operations.models import Operation
from orders.models import Order, Payment
from tests.api.test_database_unavailable import assert_service_unavailable, libpq_params
from tests.support.http import Api, ClientResponse, body_of, payment_body

# Another connection must see the orders the test places, and hold their rows.
pytestmark = pytest.mark.django_db(transaction=True)

KEY = "lock-wait-1"


@dataclass(frozen=True)
class OrderCommand:
    """One command that locks the order's row, and what it answers once executed."""

    send: Callable[[Api, dict[str, Any]], ClientResponse]
    executed_status: int
    # Once executed: the order's status, and how many payments and operations exist.
    effects: tuple[str, int, int]


def cancel(api: Api, order: dict[str, Any]) -> ClientResponse:
    return api.post(f"/v1/orders/{order['id']}/cancel", {"reason": "changed my mind"}, key=KEY)


def pay(api: Api, order: dict[str, Any]) -> ClientResponse:
    return api.post("/v1/payments", payment_body(order), key=KEY)


COMMANDS = pytest.mark.parametrize(
    "command",
    [
        OrderCommand(cancel, executed_status=200, effects=("cancelled", 0, 0)),
        OrderCommand(pay, executed_status=202, effects=("pending", 1, 1)),
    ],
    ids=["cancel", "payment"],
)


def place_order(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/v1/orders", body, key="place-order")
    assert response.status_code == 201
    order: dict[str, Any] = body_of(response)["order"]
    assert order["status"] == "pending"
    return order


@dataclass
class HeldRow:
    """The connection holding an order's row, and its backend's pid."""

    holder: psycopg.Connection[Any]
    pid: int


@contextmanager
def order_row_held(order: dict[str, Any]) -> Iterator[HeldRow]:
    """Hold the order's row with ``FOR UPDATE`` from another connection, as a worker would.

    The transaction stays open for the block, then rolls back, which
    releases the row unless the test has released it already.
    """
    internal_id = Order.objects.get(id=order["id"]).pk
    with psycopg.connect(**libpq_params()) as holder:
        locked = holder.execute(
            "SELECT 1 FROM orders_order WHERE internal_id = %s FOR UPDATE", [internal_id]
        ).fetchone()
        assert locked is not None
        try:
            yield HeldRow(holder=holder, pid=holder.info.backend_pid)
        finally:
            holder.rollback()


def effects(order: dict[str, Any]) -> tuple[str, int, int]:
    return (
        Order.objects.get(id=order["id"]).status,
        Payment.objects.count(),
        Operation.objects.count(),
    )


def stored_state(order: dict[str, Any]) -> dict[str, Any]:
    """What a command could have written: the order's row, its key, payments, operations."""
    return {
        "order": Order.objects.filter(id=order["id"]).values().get(),
        "keys": list(IdempotencyKey.objects.filter(key=KEY).values_list("key", flat=True)),
        "payments": Payment.objects.count(),
        "operations": Operation.objects.count(),
    }


@COMMANDS
def test_a_command_that_outwaits_the_bound_on_the_order_row_is_503_and_its_retry_executes_once(
    api: Api,
    order_body: dict[str, Any],
    settings: Settings,
    command: OrderCommand,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The bound is IDEMPOTENCY_WAIT (2 s by default); 0.3 s keeps the test quick.
    settings.IDEMPOTENCY_WAIT = 0.3
    order = place_order(api, order_body)
    before = stored_state(order)

    with order_row_held(order):
        started = time.monotonic()
        with caplog.at_level(logging.WARNING):
            failed = command.send(api, order)
        elapsed = time.monotonic() - started

    assert_service_unavailable(failed)
    # It waited for the row (the bound), and no longer: the wait is bounded, not hung.
    assert 0.3 <= elapsed < 5
    assert stored_state(order) == before
    assert before["keys"] == []
    # Not a bug: one warning for operators, no error.
    warnings = [(r.name, r.levelname) for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [("api.errors", "WARNING")]
    retried = command.send(api, order)
    replayed = command.send(api, order)
    assert retried.status_code == command.executed_status
    assert not retried.has_header("Idempotent-Replayed")
    assert replayed.status_code == command.executed_status
    assert replayed["Idempotent-Replayed"] == "true"
    assert replayed.content == retried.content
    assert IdempotencyKey.objects.filter(key=KEY).count() == 1
    assert effects(order) == command.effects


@COMMANDS
def test_a_command_waits_for_an_order_row_released_within_the_bound(
    api: Api, order_body: dict[str, Any], settings: Settings, command: OrderCommand
) -> None:
    settings.IDEMPOTENCY_WAIT = 5.0
    order = place_order(api, order_body)
    # The request runs on this thread's connection: its backend is the one to watch.
    connection.ensure_connection()
    command_pid = connection.connection.info.backend_pid
    seen_waiting = threading.Event()

    with order_row_held(order) as held:

        def release_once_the_command_waits() -> None:
            with psycopg.connect(**libpq_params(), autocommit=True) as watcher:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    # Waiting on a lock, and on the holder's: PostgreSQL
                    # announces neither, so it is polled.
                    if watcher.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
                        " AND wait_event_type = 'Lock' AND %s = ANY(pg_blocking_pids(pid))",
                        [command_pid, held.pid],
                    ).fetchone():
                        seen_waiting.set()
                        break
                    time.sleep(0.005)
            # Released either way, so that a test that failed to see the
            # wait fails by its assertions rather than by a timeout.
            held.holder.rollback()

        release = threading.Thread(target=release_once_the_command_waits)
        release.start()
        started = time.monotonic()
        response = command.send(api, order)
        elapsed = time.monotonic() - started
        release.join()

    assert seen_waiting.is_set()
    assert response.status_code == command.executed_status, response.content
    assert not response.has_header("Idempotent-Replayed")
    assert elapsed < 5
    assert IdempotencyKey.objects.filter(key=KEY).count() == 1
    assert effects(order) == command.effects


def test_no_command_waits_for_a_lock_on_its_principals_row(
    api: Api, order_body: dict[str, Any], settings: Settings
) -> None:
    # A key's principal has no constraint in the database (idempotency/models.py):
    # with one, every command's COMMIT locked the principal's row (FOR KEY
    # SHARE), and waited behind anything that held it, here for the bound.
    settings.IDEMPOTENCY_WAIT = 0.3
    order = place_order(api, order_body)

    with psycopg.connect(**libpq_params()) as holder:
        locked = holder.execute(
            "SELECT 1 FROM accounts_principal WHERE id = %s FOR UPDATE", [api.principal.pk]
        ).fetchone()
        assert locked is not None
        placed = api.post("/v1/orders", order_body, key="while-held")
        paid = pay(api, order)
        holder.rollback()

    assert placed.status_code == 201, placed.content
    assert paid.status_code == 202, paid.content
    assert IdempotencyKey.objects.filter(key__in=["while-held", KEY]).count() == 2
