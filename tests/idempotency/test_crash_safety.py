"""Rule 9 — Crash safety and one transaction: a process that dies or hangs leaves no stuck key.

The idempotency rules (docs/SPECIFICATION.md §3) have a key claimed, the
command's effects written and the answer stored in one transaction, so a
client process that dies or hangs half-way must leave nothing that blocks
the retry. Each test starts a real client process
(tests/support/crashing_client.py) on the suite's database and ends or
stalls it for real:

- killed (SIGKILL) after claiming its key and before committing, held
  there by a lock the test takes: the dead command left neither its order
  nor its key, and the retry executes once;
- hung idle in its transaction: PostgreSQL ends it after
  ``IDEMPOTENCY_LOCK_TIMEOUT``, and the retry, which was waiting on the
  key, claims it and executes once;
- stuck in a database statement: ``statement_timeout`` cancels it, and
  the retry executes once.

The other rules are in test_rules.py, a section each.
"""

import os
import signal
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import override_settings

from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.support import probes
from tests.support.concurrency import wait_for_lock_waiters
from tests.support.http import Api
from tests.support.live import ROOT, suite_database_url
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def spawn(mode: str, key: str, token: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.crashing_client", mode, key, token],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": suite_database_url(), **env},
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_process_killed_between_claim_and_commit_leaves_no_stuck_key(
    api: Api, order_body: dict[str, Any]
) -> None:
    with psycopg.connect(suite_database_url()) as locker:
        # Hold the orders table so the client's command stops after it has
        # claimed its key and before it commits.
        locker.execute("LOCK TABLE orders_order IN ACCESS EXCLUSIVE MODE")
        client = spawn("create", "crash-key", api.token)
        wait_for_lock_waiters()
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=10)
    # Leaving the block committed the lock holder's transaction.

    retry = api.post(
        "/v1/orders",
        {"customerId": "crash", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"},
        key="crash-key",
    )

    assert client.returncode == -signal.SIGKILL
    assert retry.status_code == 201
    assert not retry.has_header("Idempotent-Replayed")
    assert Order.objects.count() == 1
    assert IdempotencyKey.objects.get().answer.status == 201


@pytest.mark.urls("tests.support.probes")
@override_settings(IDEMPOTENCY_WAIT=10)
def test_a_hung_process_releases_its_key_after_the_lock_timeout(api: Api) -> None:
    client = spawn("hang", "hung-key", api.token, IDEMPOTENCY_LOCK_TIMEOUT="1")
    assert client.stdout is not None
    try:
        assert client.stdout.readline().strip() == "started"
        probes.slow_command_release.set()  # in this process only: the retry runs through

        retry = api.post("/v1/probes/slow", {}, key="hung-key")
    finally:
        client.kill()
        client.wait(timeout=10)
        probes.slow_command_release.clear()

    # PostgreSQL ended the hung transaction after IDEMPOTENCY_LOCK_TIMEOUT
    # (1 s); the retry waited on the key, then claimed it and executed once.
    assert retry.status_code == 201
    assert not retry.has_header("Idempotent-Replayed")
    assert Order.objects.count() == 1


@pytest.mark.urls("tests.support.probes")
@override_settings(IDEMPOTENCY_WAIT=10)
def test_a_command_stuck_in_a_statement_releases_its_key_after_the_lock_timeout(api: Api) -> None:
    client = spawn(
        "stuck", "stuck-key", api.token, IDEMPOTENCY_LOCK_TIMEOUT="1", PROBE_STUCK_SECONDS="60"
    )
    try:
        wait_for(sleeping_backends, lambda n: n > 0, what="the stuck command's pg_sleep running")

        retry = api.post("/v1/probes/stuck", {}, key="stuck-key")
    finally:
        client.kill()
        client.wait(timeout=10)

    # statement_timeout cancelled the statement after 1 s, which rolled the
    # command back; the retry waited on the key, then executed once.
    assert retry.status_code == 201
    assert not retry.has_header("Idempotent-Replayed")
    assert Order.objects.count() == 1


def sleeping_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep%%'"
        )
        sleeping: int = cursor.fetchone()[0]
        return sleeping
