"""The asynchronous half: a worker killed mid-task, the broker down, a deploy.

An accepted payment is an operation row committed with the command (the
outbox). Whatever happens to the messages that carry it, the sweep that
every worker runs publishes it again once it is due, and the provider key
derived from the payment makes every attempt one charge.
"""

import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
import requests

from tests.faults.harness import (
    Audit,
    Deployment,
    Figures,
    RetryingClient,
    audit,
    claimed_operations,
    operation_state,
    seconds_until_finished,
    sigkill,
    waiting_on_a_lock,
)
from tests.support.faults import RedisServer
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# Goals: with default settings, every operation a killed worker held is
# finished within 20 s after a worker is available again, and every
# operation accepted during a broker outage within 10 s after it is back.
WORKER_KILLED_GOAL_S = 20.0
BROKER_BACK_GOAL_S = 10.0
# How long the broker stays down: the outage a payments team measured.
BROKER_OUTAGE_S = 15.0


def test_worker_killed_holding_messages(
    deployment: Deployment, token: str, database_url: str
) -> None:
    figures = Figures("worker killed holding messages", goal_s=WORKER_KILLED_GOAL_S)
    deployment.start_web()
    # A slow provider, so that the worker is killed mid-call.
    doomed = deployment.start_worker(PAYMENT_PROVIDER_LATENCY="2")
    client = RetryingClient(deployment.service.base_url, token, figures)
    orders = [client.order_and_pay() for _ in range(4)]
    wait_for(
        lambda: claimed_operations(database_url),
        lambda claimed: len(claimed) == 1,
        what="the doomed worker holding an operation",
    )

    sigkill(doomed)
    deployment.start_worker()
    available_at = time.monotonic()
    figures.recovery_s = seconds_until_finished(
        database_url, since=available_at, within_s=WORKER_KILLED_GOAL_S
    )

    customers = [o["customerId"] for o in orders]
    found = figures.audited(audit(database_url, orders=customers, paid=customers))
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)
    assert figures.recovery_s <= WORKER_KILLED_GOAL_S


def test_broker_down_and_back(
    deployment: Deployment, broker: RedisServer, token: str, database_url: str
) -> None:
    figures = Figures("broker down and back", goal_s=BROKER_BACK_GOAL_S)
    deployment.start_web()
    deployment.start_worker()
    client = RetryingClient(deployment.service.base_url, token, figures)
    orders = [client.place_order() for _ in range(10)]

    broker.stop()
    down_at = time.monotonic()
    accepted = [client.pay(order) for order in orders]
    ready = requests.get(deployment.service.url("/readyz"), timeout=10)
    # Long enough for Celery's own reconnect backoff (2, 4, 6… s) to show.
    time.sleep(max(0.0, BROKER_OUTAGE_S - (time.monotonic() - down_at)))
    found, recovery_s = broker_back_then_audit(broker, database_url, orders, figures)

    assert all(a["status"] == "processing" for a in accepted)
    assert ready.status_code == 503
    assert ready.json()["checks"] == {"database": True, "broker": False}
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)
    assert recovery_s <= BROKER_BACK_GOAL_S


def broker_back_then_audit(
    broker: RedisServer, database_url: str, orders: Sequence[dict[str, Any]], figures: Figures
) -> tuple[Audit, float]:
    """Start the broker again; the audit of ``orders`` once every operation ended, and when."""
    broker.start()
    back_at = time.monotonic()
    recovery_s = figures.recovery_s = seconds_until_finished(
        database_url, since=back_at, within_s=BROKER_BACK_GOAL_S
    )
    customers = [o["customerId"] for o in orders]
    return figures.audited(audit(database_url, orders=customers, paid=customers)), recovery_s


# Celery's own limit of reconnection attempts, after which a worker exited:
# at one a second (config/celery.py), a broker down for 100 s.
CELERY_DEFAULT_RECONNECTS = 100


def test_broker_down_past_celerys_own_reconnect_limit(
    deployment: Deployment, broker: RedisServer, token: str, database_url: str
) -> None:
    figures = Figures("broker down past 100 reconnects", goal_s=BROKER_BACK_GOAL_S)
    deployment.start_web()
    worker = deployment.start_worker()
    client = RetryingClient(deployment.service.base_url, token, figures)
    orders = [client.place_order() for _ in range(3)]

    broker.stop()
    accepted = [client.pay(order) for order in orders]
    # The worker's next attempt after the last one Celery allowed by default.
    deployment.wait_for_worker_line(
        worker, f"({CELERY_DEFAULT_RECONNECTS + 1}/", within_s=CELERY_DEFAULT_RECONNECTS + 30
    )
    found, recovery_s = broker_back_then_audit(broker, database_url, orders, figures)

    assert all(a["status"] == "processing" for a in accepted)
    assert worker.poll() is None, "the worker gave up on the broker"
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)
    assert recovery_s <= BROKER_BACK_GOAL_S


def test_sigterm_under_load_finishes_what_is_in_flight(
    deployment: Deployment, token: str, database_url: str
) -> None:
    """A deploy: gunicorn and the worker get SIGTERM while they work, then new ones start."""
    figures = Figures("SIGTERM under load")
    deployment.start_web()
    worker = deployment.start_worker(PAYMENT_PROVIDER_LATENCY="1")
    client = RetryingClient(deployment.service.base_url, token, figures)
    paid = [client.order_and_pay() for _ in range(6)]
    wait_for(
        lambda: claimed_operations(database_url),
        lambda claimed: len(claimed) == 1,
        what="the worker holding an operation",
    )
    answers: dict[str, Any] = {}

    with psycopg.connect(database_url) as locker:
        # Commands in flight at the signal: they wait for the orders table.
        locker.execute("LOCK TABLE orders_order IN ACCESS EXCLUSIVE MODE")
        in_flight = [
            threading.Thread(target=lambda c=c: answers.update({c: client.place_order(c)}))
            for c in ("in-flight-1", "in-flight-2")
        ]
        for thread in in_flight:
            thread.start()
        wait_for(
            lambda: waiting_on_a_lock(database_url),
            lambda waiting: waiting == 2,
            what="both commands in flight waiting on the table's lock",
        )
        (running,) = claimed_operations(database_url)
        assert deployment.web is not None
        deployment.web.terminate()
        worker.terminate()
    # The lock is gone: the commands in flight finish, the worker its task.
    for thread in in_flight:
        thread.join(timeout=60)
    assert deployment.web.wait(timeout=60) == 0
    assert worker.wait(timeout=60) == 0
    finished_by_the_old_worker = operation_state(database_url, running)
    sent_before_restart = figures.sent

    deployment.start_web()
    deployment.start_worker()
    restarted_at = time.monotonic()
    figures.recovery_s = seconds_until_finished(database_url, since=restarted_at, within_s=20)

    customers = [o["customerId"] for o in paid]
    found = figures.audited(audit(database_url, orders=[*customers, *answers], paid=customers))
    assert sorted(answers) == ["in-flight-1", "in-flight-2"]
    assert sent_before_restart == 6 + 6 + 2  # no attempt of the commands in flight failed
    assert finished_by_the_old_worker == ("succeeded", 1)
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)
