"""The service, unchanged, behind PgBouncer in transaction pooling mode.

gunicorn (several workers, each thread with its persistent connection) and
a Celery worker reach the suite's database through a real PgBouncer whose
pool has fewer server connections than they have clients, and which hands
a client's consecutive transactions to different server sessions. Only the
environment differs from a direct deployment: ``DATABASE_URL`` names the
pooler. The idempotency rules, exactly-once execution and the payment
worker must hold as they do without it, and the pooler must really have
pooled: more clients than servers, and never more servers than its pool.

Why the service needs nothing more: its transactions carry all their state
(``SET LOCAL`` is transaction-local; the key's claim is a row
lock held by the transaction), and Django's psycopg cursors bind
parameters on the client, so no prepared statement outlives a
transaction. The administration commands run through the pooler too
(``provider_ledger`` streams its rows inside one transaction).
"""

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from psycopg import sql

from idempotency.models import IdempotencyKey
from orders.models import Order, Payment
from tests.support.concurrency import lock_waiters, run_concurrently
from tests.support.http import ORDER, Api, payment_body
from tests.support.live import (
    LiveService,
    manage,
    operation_ended,
    post_command,
    serve,
    suite_database_env,
    suite_database_url,
)
from tests.support.pooler import Console, PgBouncer, pgbouncer
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# Server connections in PgBouncer's pool: far fewer than the clients below.
POOL_SIZE = 4
# gunicorn workers; each has 8 threads (config/gunicorn.py), and each thread
# that serves keeps a connection to PgBouncer: up to 24 clients, and the
# Celery worker's.
WEB_WORKERS = 3
STORM = 64
PAYMENT_STORM = 32


@dataclass(frozen=True)
class Pooled:
    """The service behind PgBouncer, and the environment it runs with."""

    service: LiveService
    pooler: PgBouncer
    env: dict[str, str]


@pytest.fixture(scope="module")
def pooled(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pooled]:
    from config.celery import app

    with pgbouncer(suite_database_url(), pool_size=POOL_SIZE) as pooler:
        env = {
            **suite_database_env(
                CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
                VAR_DIR=str(tmp_path_factory.mktemp("var")),
                DEBUG="0",
            ),
            "DATABASE_URL": pooler.url,
        }
        # Messages of earlier runs name operations that no longer exist.
        app.control.purge()
        with serve(env, web_workers=WEB_WORKERS, celery=True) as service:
            yield Pooled(service=service, pooler=pooler, env=env)


@dataclass(frozen=True)
class Remote:
    """One principal (the ``api`` fixture's) talking to the pooled service over HTTP."""

    service: LiveService
    api: Api

    def post(self, path: str, body: Any, *, key: str) -> requests.Response:
        return post_command(self.service.url(path), body, token=self.api.token, key=key)

    def get(self, path: str) -> requests.Response:
        return requests.get(self.service.url(path), headers=self.api.headers(), timeout=30)

    def place_order(self, key: str) -> dict[str, Any]:
        response = self.post("/v1/orders", ORDER, key=key)
        assert response.status_code == 201, response.text
        order: dict[str, Any] = response.json()["order"]
        return order

    def finished_operation(self, location: str) -> dict[str, Any]:
        """Poll an operation as a client does until it leaves ``processing``."""
        return operation_ended(self.service.url(location), self.api.headers())


@pytest.fixture
def remote(pooled: Pooled, api: Api) -> Remote:
    return Remote(service=pooled.service, api=api)


def ledger(pooled: Pooled) -> list[dict[str, Any]]:
    """``manage.py provider_ledger`` through the pooler, as an operator runs it."""
    return [json.loads(line) for line in manage("provider_ledger", env=pooled.env).splitlines()]


# --- the pooler really pools ------------------------------------------------------


@dataclass
class PoolUse:
    """What PgBouncer held for the database while a block ran, sampled on its console."""

    peak_clients: int = 0
    peak_servers: int = 0
    # PostgreSQL's pid of each server connection seen: a server closed and
    # replaced would add one.
    server_pids: set[int] = field(default_factory=set)

    def sample(self, console: Console) -> None:
        servers = console.servers()
        self.peak_servers = max(self.peak_servers, len(servers))
        self.peak_clients = max(self.peak_clients, len(console.clients()))
        # A server still logging in has no pid yet (0).
        self.server_pids.update(s["remote_pid"] for s in servers if s["remote_pid"])


@contextmanager
def pool_use(pooler: PgBouncer) -> Iterator[PoolUse]:
    """Sample PgBouncer's clients and servers every 10 ms while the block runs."""
    use = PoolUse()
    finished = threading.Event()

    def sample() -> None:
        with pooler.console() as console:
            while not finished.wait(0.01):
                use.sample(console)
            use.sample(console)

    with ThreadPoolExecutor(1) as executor:
        sampling = executor.submit(sample)
        try:
            yield use
        finally:
            finished.set()
            sampling.result()  # the sampler's own failure, if any


def assert_pooled(use: PoolUse) -> None:
    """More clients were connected at once than the pool has servers, and the pool held."""
    assert use.peak_clients > POOL_SIZE
    assert use.peak_servers <= POOL_SIZE
    assert 0 < len(use.server_pids) <= POOL_SIZE


# --- orders: the walkthrough and the in-flight rules -------------------------------


def test_the_walkthrough_holds_through_the_pooler(remote: Remote) -> None:
    created = remote.post("/v1/orders", ORDER, key="walk-1")
    order_id = created.json()["orderId"]
    fetched = remote.get(created.headers["Location"])
    listed = remote.get("/v1/orders")
    replayed = remote.post("/v1/orders", ORDER, key="walk-1")
    other = {**ORDER, "items": [{"sku": "ABC", "qty": 3}]}
    conflict = remote.post("/v1/orders", other, key="walk-1")

    assert created.status_code == 201
    assert created.headers["Location"] == f"/v1/orders/{order_id}"
    assert "Idempotent-Replayed" not in created.headers
    assert fetched.status_code == 200
    assert fetched.json()["id"] == order_id
    assert fetched.json()["totalAmount"] == 3980
    assert listed.status_code == 200
    assert [o["id"] for o in listed.json()["results"]] == [order_id]
    assert replayed.status_code == 201
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.content == created.content
    assert replayed.headers["Location"] == created.headers["Location"]
    assert conflict.status_code == 409
    assert conflict.headers["Content-Type"] == "application/problem+json"
    assert conflict.json()["error"] == "IdempotencyKeyConflict"
    assert conflict.json()["details"]["mismatch"] == ["/items/0/qty"]
    assert conflict.json()["idempotencyKey"] == "walk-1"
    assert Order.objects.count() == 1


@contextmanager
def orders_blocked() -> Iterator[None]:
    """No order can be inserted while the block runs (a SHARE lock on the table)."""
    with psycopg.connect(suite_database_url()) as blocker:
        blocker.execute(
            sql.SQL("LOCK TABLE {} IN SHARE MODE").format(sql.Identifier(Order._meta.db_table))
        )
        try:
            yield
        finally:
            blocker.rollback()


def test_a_duplicate_waits_for_the_running_command_and_gets_its_replay(remote: Remote) -> None:
    def send() -> requests.Response:
        return remote.post("/v1/orders", ORDER, key="in-flight")

    with ThreadPoolExecutor(2) as executor, orders_blocked():
        # The first claims the key and then waits to insert its order; its
        # wait is bounded by IDEMPOTENCY_WAIT too, so the lock is let go
        # as soon as the duplicate is seen waiting for the key.
        first: Future[requests.Response] = executor.submit(send)
        wait_for(lock_waiters, lambda n: n == 1, what="the first command waiting on its lock")
        duplicate = executor.submit(send)
        wait_for(lock_waiters, lambda n: n == 2, what="the duplicate waiting on the lock too")

    assert first.result().status_code == 201
    assert "Idempotent-Replayed" not in first.result().headers
    assert duplicate.result().status_code == 201
    assert duplicate.result().headers["Idempotent-Replayed"] == "true"
    assert duplicate.result().content == first.result().content
    assert Order.objects.count() == 1


def test_a_duplicate_still_running_after_the_wait_is_told_to_retry(remote: Remote) -> None:
    with transaction.atomic():
        # What a running command holds: its key's claim, uncommitted. Held
        # here because a real command cannot be kept running past
        # IDEMPOTENCY_WAIT: its own lock waits are bounded by it too.
        IdempotencyKey.objects.create(
            tenant_id=remote.api.principal.tenant_id,
            principal=remote.api.principal,
            key="held",
            request_method="POST",
            request_path="/v1/orders",
            fingerprint="",
            expires_at=timezone.now() + timedelta(hours=1),
        )
        started = time.monotonic()
        refused = remote.post("/v1/orders", ORDER, key="held")
        waited = time.monotonic() - started
        executed_meanwhile = Order.objects.count()
        transaction.set_rollback(True)
    retried = remote.post("/v1/orders", ORDER, key="held")

    assert refused.status_code == 409
    assert refused.headers["Content-Type"] == "application/problem+json"
    assert refused.json()["error"] == "IdempotencyKeyInProgress"
    assert int(refused.headers["Retry-After"]) > 0
    # lock_timeout, set for the transaction only, reached the server that ran it.
    assert waited >= settings.IDEMPOTENCY_WAIT * 0.9
    assert executed_meanwhile == 0
    assert retried.status_code == 201
    assert "Idempotent-Replayed" not in retried.headers
    assert Order.objects.count() == 1


def test_an_order_storm_through_the_pooler_executes_once(pooled: Pooled, remote: Remote) -> None:
    with pool_use(pooled.pooler) as use:
        responses = run_concurrently(STORM, lambda i: remote.post("/v1/orders", ORDER, key="storm"))

    assert {r.status_code for r in responses} == {201}
    assert len({r.content for r in responses}) == 1
    assert sum("Idempotent-Replayed" not in r.headers for r in responses) == 1
    assert Order.objects.count() == 1
    assert_pooled(use)


# --- payments, charged by the worker through the pooler ----------------------------


def test_a_payment_is_charged_through_the_pooler(pooled: Pooled, remote: Remote) -> None:
    order = remote.place_order("order")

    accepted = remote.post("/v1/payments", payment_body(order), key="pay")
    operation = remote.finished_operation(accepted.headers["Location"])
    payment = remote.get(f"/v1/payments/{accepted.json()['paymentId']}").json()

    assert accepted.status_code == 202
    assert operation["status"] == "succeeded"
    assert operation["resultId"] == accepted.json()["paymentId"]
    assert payment["status"] == "succeeded"
    assert remote.get(f"/v1/orders/{order['id']}").json()["status"] == "paid"
    assert [(e["kind"], e["paymentId"], e["amount"]) for e in ledger(pooled)] == [
        ("charge", payment["id"], order["totalAmount"])
    ]


def test_a_payment_storm_through_the_pooler_charges_once(pooled: Pooled, remote: Remote) -> None:
    order = remote.place_order("order")

    def pay(i: int) -> requests.Response:
        return remote.post("/v1/payments", payment_body(order), key="pay-storm")

    with pool_use(pooled.pooler) as use:
        responses = run_concurrently(PAYMENT_STORM, pay)
    answers = [r.json() for r in responses]
    operation = remote.finished_operation(responses[0].headers["Location"])

    assert {r.status_code for r in responses} == {202}
    assert len({(a["paymentId"], a["operationId"]) for a in answers}) == 1
    assert sum("Idempotent-Replayed" not in r.headers for r in responses) == 1
    assert operation["status"] == "succeeded"
    assert Payment.objects.filter(order__id=order["id"]).count() == 1
    assert [(e["kind"], e["paymentId"]) for e in ledger(pooled)] == [
        ("charge", answers[0]["paymentId"])
    ]
    assert_pooled(use)


def test_a_declined_card_fails_with_card_declined(remote: Remote) -> None:
    order = remote.place_order("order")

    accepted = remote.post("/v1/payments", payment_body(order, "pm_card_declined"), key="pay")
    operation = remote.finished_operation(accepted.headers["Location"])
    payment = remote.get(f"/v1/payments/{accepted.json()['paymentId']}").json()

    assert accepted.status_code == 202
    assert operation["status"] == "failed"
    assert operation["error"]["error"] == "PaymentDeclined"
    assert payment["status"] == "failed"
    assert payment["failureCode"] == "card_declined"
    assert remote.get(f"/v1/orders/{order['id']}").json()["status"] == "pending"
