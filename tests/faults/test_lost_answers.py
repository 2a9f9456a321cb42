"""Answers lost on the way back, and web workers killed inside a command.

The client cannot tell these apart: its request got no answer. It sends
the same command again under the same key, and the service answers as if
it had been asked once: the command executed once, and the retry gets its
answer (a replay when the first execution committed).
"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from tests.faults.harness import (
    Deployment,
    Figures,
    RetryingClient,
    audit,
    payments_of,
    seconds_until_finished,
    sigkill,
    waiting_on_a_lock,
)
from tests.support.faults import FaultProxy, Mode, RedisServer
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# The most a lost message may take to go out again: it is due
# OPERATION_STALE_AFTER (10 s) after its publish, and a sweep runs every
# OPERATION_SWEEP_INTERVAL (2 s); then it runs in well under a second.
LOST_MESSAGE_GOAL_S = 15.0


def test_answers_dropped_after_commit(
    deployment: Deployment, token: str, database_url: str
) -> None:
    figures = Figures("answers dropped after commit")
    deployment.start_web()
    deployment.start_worker()
    with FaultProxy(deployment.service.address, mode=Mode.DROP_ANSWERS, drop_every=2) as proxy:
        client = RetryingClient(f"http://127.0.0.1:{proxy.port}", token, figures)

        with ThreadPoolExecutor(4) as pool:
            customers = [o["customerId"] for o in pool.map(client.order_and_pay, range(20))]
        started = time.monotonic()
        figures.recovery_s = seconds_until_finished(database_url, since=started, within_s=10)

    found = figures.audited(audit(database_url, orders=customers, paid=customers))
    assert proxy.dropped >= 20
    assert figures.unanswered >= 20
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)


def test_web_worker_killed_between_claim_and_commit(
    deployment: Deployment, token: str, database_url: str
) -> None:
    figures = Figures("web worker killed between claim and commit")
    deployment.start_web(workers=1)
    client = RetryingClient(deployment.service.base_url, token, figures)
    answer: dict[str, Any] = {}

    with psycopg.connect(database_url) as locker:
        # The command claims its key, then waits for the orders table.
        locker.execute("LOCK TABLE orders_order IN ACCESS EXCLUSIVE MODE")
        placing = threading.Thread(target=lambda: answer.update(client.place_order("killed-1")))
        placing.start()
        wait_for(
            lambda: waiting_on_a_lock(database_url),
            lambda waiting: waiting == 1,
            what="the command waiting on the table's lock",
        )
        (worker,) = deployment.web_worker_pids()
        sigkill(worker)
        killed_at = time.monotonic()
    placing.join(timeout=60)
    figures.recovery_s = time.monotonic() - killed_at

    found = figures.audited(audit(database_url, orders=["killed-1"]))
    assert answer["customerId"] == "killed-1"
    assert figures.unanswered == 1
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)


def test_web_worker_killed_after_commit(
    deployment: Deployment, broker: RedisServer, token: str, database_url: str
) -> None:
    figures = Figures("web worker killed after commit", goal_s=LOST_MESSAGE_GOAL_S)
    with FaultProxy(("127.0.0.1", broker.port)) as broker_proxy:
        # The web's broker stalls, so the payment command, once committed,
        # hangs in its publish: the moment to kill its process.
        deployment.start_web(
            workers=1, CELERY_BROKER_URL=f"redis://127.0.0.1:{broker_proxy.port}/0"
        )
        deployment.start_worker()
        client = RetryingClient(deployment.service.base_url, token, figures)
        order = client.place_order("paid-after-kill")
        broker_proxy.mode = Mode.STALL
        answers: list[dict[str, Any]] = []
        paying = threading.Thread(target=lambda: answers.append(client.pay(order)))
        paying.start()
        wait_for(
            lambda: payments_of(database_url, order["id"]),
            lambda payments: payments == 1,
            what="the payment committed",
        )
        (worker,) = deployment.web_worker_pids()
        sigkill(worker)
        killed_at = time.monotonic()
        broker_proxy.mode = Mode.PASS
        paying.join(timeout=60)
        figures.recovery_s = seconds_until_finished(
            database_url, since=killed_at, within_s=LOST_MESSAGE_GOAL_S
        )

    found = figures.audited(
        audit(database_url, orders=["paid-after-kill"], paid=["paid-after-kill"])
    )
    assert answers[0]["status"] in ("processing", "succeeded")
    assert figures.unanswered == 1
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)
    assert figures.recovery_s <= LOST_MESSAGE_GOAL_S
