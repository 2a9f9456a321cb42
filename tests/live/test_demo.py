"""`make demo`'s program (tests/demo), run as the Makefile runs it, on both set-ups.

The demo's last line is its verdict, counted from the database and the
provider's ledger: these tests hold it to "0 duplicates" with the share of
dropped answers the README promises, on the embedded default and on
PostgreSQL and Redis. Its webhook line is held to every event of the feed
(an order and a payment per action) handled once by its receiver.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.live import ROOT, base_env, suite_database_env

ORDERS = 10
VERDICT = re.compile(r"^demo: (\d+) orders, (\d+) charges, (\d+) retries, (\d+) duplicates$")
DROPPED = re.compile(r"^proxy: \d+ requests, (\d+) of (\d+) answers dropped")
WEBHOOKS = re.compile(
    r"^webhooks: (\d+) events in the feed, (\d+) deliveries received, (\d+) handled,"
    r" (\d+) handled twice$"
)


def run_demo(env: dict[str, str]) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.demo"],
        cwd=ROOT,
        env={**env, "DEMO_ORDERS": str(ORDERS), "DEMO_SEED": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def assert_exactly_once(lines: list[str]) -> None:
    (verdict,) = [m for m in map(VERDICT.match, lines) if m]
    orders, charges, retries, duplicates = map(int, verdict.groups())
    assert (orders, charges, duplicates) == (ORDERS, ORDERS, 0)
    (dropped,) = [m for m in map(DROPPED.match, lines) if m]
    lost, answered = map(int, dropped.groups())
    assert lost / answered >= 0.3
    assert retries >= lost
    (webhooks,) = [m for m in map(WEBHOOKS.match, lines) if m]
    events, received, handled, handled_twice = map(int, webhooks.groups())
    # order.created and payment.succeeded of each action.
    assert (events, handled, handled_twice) == (2 * ORDERS, 2 * ORDERS, 0)
    assert received >= handled


def test_demo_on_the_embedded_default(tmp_path: Path) -> None:
    assert_exactly_once(run_demo(base_env(VAR_DIR=str(tmp_path))))


@pytest.mark.django_db(transaction=True)
def test_demo_on_postgresql_and_redis() -> None:
    env = suite_database_env(CELERY_BROKER_URL=settings.CELERY_BROKER_URL)
    lines = run_demo(env)
    assert_exactly_once(lines)
    assert lines[0].startswith("demo: the service on postgres://")
