"""One tenant's slow webhook receivers against another tenant's payments and deliveries.

The attack as it was found: receivers that take the connection and send
their answer a byte at a time, each byte within any read timeout. Each
attempt at them lasts ``WEBHOOK_TIMEOUT`` in all (events.outbound), and
runs on the delivery workers (``-Q webhooks``), as docs/DEPLOYING.md runs
them: another tenant's payments are charged on workers the attack cannot
reach, in their usual time, and its deliveries wait at most for one attempt,
however many slow receivers the attacker has: it holds at most
``WEBHOOK_TENANT_CONCURRENCY`` of the delivery worker's slots, and the
worker has more.
"""

import statistics
import time
import uuid
from contextlib import ExitStack
from typing import Any

import pytest
import requests
from django.conf import settings

from accounts.services import create_api_client
from tests.faults.harness import BROKERS, REPORT, Deployment, Figures, RetryingClient
from tests.support.receiver import Receiver, hostile, receiving
from tests.support.waits import wait_for, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WEBHOOK_TIMEOUT_S = 3.0
# A tenant's attempts in flight at most, and the deliveries worker's slots:
# more, as docs/DEPLOYING.md says.
TENANT_BOUND = 2
DELIVERY_SLOTS = 3
WEBHOOKS = {
    "WEBHOOK_ALLOW_PRIVATE_URLS": "true",
    "WEBHOOK_RETRY_BACKOFF": "0.5",
    "WEBHOOK_MAX_ATTEMPTS": "50",
    "WEBHOOK_TIMEOUT": f"{WEBHOOK_TIMEOUT_S:g}",
    "WEBHOOK_TENANT_CONCURRENCY": str(TENANT_BOUND),
}
PAYMENTS = 5
# What a payment may take beyond twice its usual time on a loaded CI
# machine: a poll's interval and a scheduler's hiccup, far below an attempt.
PAYMENT_SLACK_S = 0.5
# A delivery's own time beyond the one attempt it may wait for: the worker
# taking the message, and the request itself.
DELIVERY_SLACK_S = 2.0


def subscribe(client: RetryingClient, url: str) -> None:
    response = client.command(
        "POST",
        "/v1/webhook-endpoints",
        {"url": url, "eventTypes": ["*"]},
        key=f"subscribe-{uuid.uuid4().hex}",
    )
    assert response.status_code == 201, response.text


def seconds_to_pay(client: RetryingClient) -> float:
    """From sending a payment to seeing its operation succeeded."""
    order = client.place_order()
    started = time.monotonic()
    accepted = client.pay(order)

    def status() -> str:
        response = requests.get(
            client.base_url + accepted["links"]["operation"],
            headers={"Authorization": f"Bearer {client.token}"},
            timeout=10,
        )
        state: str = response.json()["status"]
        return state

    wait_for(status, lambda s: s == "succeeded", 60, interval=0.05, what="the payment succeeding")
    return time.monotonic() - started


@pytest.mark.parametrize("broker_kind", BROKERS)
def test_slow_receivers_delay_neither_another_tenant_s_payments_nor_its_deliveries(
    broker_kind: str, deployment: Deployment, token: str
) -> None:
    deployment.env = {**deployment.env, **WEBHOOKS}
    deployment.start_web()
    deployment.start_worker(queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    deployment.start_deliveries_worker(slots=DELIVERY_SLOTS)
    base_url = deployment.service.base_url
    victim = RetryingClient(base_url, token, Figures("tenant isolation"))
    attacker = RetryingClient(
        base_url,
        create_api_client(tenant_slug="attacker", name="slow").token,
        Figures("the attacker"),
    )
    usual = [seconds_to_pay(victim) for _ in range(PAYMENTS)]

    with hostile("trickle") as first, hostile("trickle") as second, receiving() as fast:
        subscribe(attacker, first.url)
        subscribe(attacker, second.url)
        attacker.place_order()
        # Two of the delivery slots are held by the trickles from here on.
        wait_until(
            lambda: first.connections and second.connections,
            30,
            what="an attempt at each slow receiver",
        )
        attacked = [seconds_to_pay(victim) for _ in range(PAYMENTS)]
        subscribe(victim, fast.url)
        delivery_waits = [seconds_to_deliver(victim, fast) for _ in range(3)]
        still_trickling = first.connections + second.connections

    usual_p50, attacked_p50 = statistics.median(usual), statistics.median(attacked)
    REPORT.append(
        f"slow receivers ({broker_kind}): another tenant's payment p50 {usual_p50:.2f} s alone, "
        f"{attacked_p50:.2f} s under attack ({attacked_p50 / usual_p50:.1f}x); "
        f"its deliveries waited {max(delivery_waits):.1f} s at most "
        f"(one attempt: {WEBHOOK_TIMEOUT_S:g} s); {still_trickling} slow attempts"
    )
    assert attacked_p50 <= 2 * usual_p50 + PAYMENT_SLACK_S, (usual, attacked)
    assert max(delivery_waits) <= WEBHOOK_TIMEOUT_S + DELIVERY_SLACK_S, delivery_waits
    assert still_trickling >= 2  # an attempt at each slow receiver, at least


def seconds_to_deliver(client: RetryingClient, receiver: Receiver) -> float:
    """From placing an order to its order.created reaching ``receiver``."""
    arrived = len(receiver.received)
    started = time.monotonic()
    order: dict[str, Any] = client.place_order()
    receiver.wait_for(arrived + 1, timeout=60)
    assert order["id"].encode() in receiver.received[arrived].body
    return time.monotonic() - started


# More slow receivers than the delivery worker has slots: one attempt at each
# would hold them all, and another tenant's delivery would wait for some
# SLOW_RECEIVERS / DELIVERY_SLOTS attempts in turn (6.1 s, two attempts,
# before the bound). The tenant's bound holds it to TENANT_BOUND slots, and
# the rest stay free for everyone else.
SLOW_RECEIVERS = 6


def test_more_slow_receivers_than_slots_delay_another_tenant_s_deliveries_one_attempt_at_most(
    deployment: Deployment, token: str
) -> None:
    deployment.env = {**deployment.env, **WEBHOOKS}
    deployment.start_web()
    deployment.start_deliveries_worker(slots=DELIVERY_SLOTS)
    base_url = deployment.service.base_url
    victim = RetryingClient(base_url, token, Figures("tenant isolation"))
    attacker = RetryingClient(
        base_url,
        create_api_client(tenant_slug="attacker", name="slow").token,
        Figures("the attacker"),
    )

    with ExitStack() as stack, receiving() as fast:
        slow = [stack.enter_context(hostile("trickle")) for _ in range(SLOW_RECEIVERS)]
        for receiver in slow:
            subscribe(attacker, receiver.url)
        attacker.place_order()
        # Each slow receiver has been tried: the attack is in full swing.
        wait_until(
            lambda: all(receiver.connections for receiver in slow),
            60,
            what="an attempt at every slow receiver",
        )
        subscribe(victim, fast.url)
        delivery_waits = [seconds_to_deliver(victim, fast) for _ in range(3)]
        slow_attempts = sum(receiver.connections for receiver in slow)

    REPORT.append(
        f"{SLOW_RECEIVERS} slow receivers of one tenant, {DELIVERY_SLOTS} delivery slots, "
        f"bound {TENANT_BOUND} a tenant: another tenant's deliveries waited "
        f"{max(delivery_waits):.1f} s at most (one attempt: {WEBHOOK_TIMEOUT_S:g} s); "
        f"{slow_attempts} slow attempts"
    )
    assert max(delivery_waits) <= WEBHOOK_TIMEOUT_S + DELIVERY_SLACK_S, delivery_waits
    assert slow_attempts >= SLOW_RECEIVERS
