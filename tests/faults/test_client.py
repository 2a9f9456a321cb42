"""The client half under faults: order_service_client against the live service.

Each scenario drives intended actions (an order, its payment, the wait for
its charge) through the real client, as an application would, while the
network or the service misbehaves; then it audits the database and the
provider's ledger. The client keeps one key per intended action and sends
it on every retry, so each action happens once whatever was lost.
"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from order_service_client import (
    CommandResult,
    OrderServiceClient,
    RetriesExhausted,
    RetryEvent,
    RetryPolicy,
    SQLiteKeyStore,
)
from order_service_client.policy import POLICY_PATH

from tests.faults.harness import (
    Deployment,
    Figures,
    audit,
    claimed_operations,
    seconds_until_finished,
    sigkill,
)
from tests.support.faults import FaultProxy, Mode, Shares
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# Short pauses, so that a scenario takes seconds; attempts enough to ride
# out a restart of gunicorn or a run of faults.
POLICY = RetryPolicy(max_attempts=40, deadline=90.0, base_delay=0.05, max_delay=0.5)
ITEM = {"sku": "ABC", "qty": 1}
# The longest a failover left commands unanswered (docs/RELIABILITY.md).
FAILOVER_WORST_S = 21.5


class CountingTransport(httpx.HTTPTransport):
    """httpx's transport, counting attempts and what came of them into a scenario's figures.

    One request per connection: the proxies' faults fall on connections.
    ``policy_lost`` counts the reads of the idempotency policy that got no
    answer: faults fall on them too, and the client does not retry them
    (its next command reads the policy again).
    """

    def __init__(self, figures: Figures) -> None:
        super().__init__(limits=httpx.Limits(max_keepalive_connections=0))
        self.figures = figures
        self.policy_lost = 0
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.figures.sent += 1
        try:
            response = super().handle_request(request)
        except httpx.TransportError as error:
            with self._lock:
                if request.url.path == POLICY_PATH:
                    self.policy_lost += 1
                # A refused connection is no request lost: nothing reached the service.
                if not isinstance(error, httpx.ConnectError):
                    self.figures.unanswered += 1
            raise
        if response.status_code >= 500:
            with self._lock:
                self.figures.server_errors += 1
        return response


class Counted:
    """Retries seen through the client's ``on_retry`` hook, into a scenario's figures."""

    def __init__(self, figures: Figures, transport: CountingTransport) -> None:
        self.figures = figures
        self.transport = transport
        self.reasons: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, event: RetryEvent) -> None:
        with self._lock:
            self.figures.retries += 1
            self.reasons.append(event.reason)


def new_client(
    base_url: str, token: str, figures: Figures, **options: Any
) -> tuple[OrderServiceClient, Counted]:
    options.setdefault("retry", POLICY)
    transport = CountingTransport(figures)
    counted = Counted(figures, transport)
    client = OrderServiceClient(base_url, token, transport=transport, on_retry=counted, **options)
    return client, counted


def order_and_pay(client: OrderServiceClient, customer_id: str) -> CommandResult:
    """One intended action: an order of one ABC, paid; the order's answer."""
    placed = client.create_order(customer_id=customer_id, currency="RUB", items=[ITEM])
    order = placed.body["order"]
    paid = client.pay(
        order_id=order["id"],
        amount=order["totalAmount"],
        currency=order["currency"],
        payment_method="pm_card_ok",
    )
    assert client.wait(paid.body, timeout=60)["status"] == "succeeded"
    return placed


def test_client_through_lost_answers_and_resets(
    deployment: Deployment, token: str, database_url: str
) -> None:
    figures = Figures("client: 40 % of answers lost, 10 % of connections reset")
    deployment.start_web()
    deployment.start_worker()
    shares = Shares(drop=0.4, reset=0.1, seed=7)
    with FaultProxy(deployment.service.address, mode=Mode.DROP_ANSWERS, shares=shares) as proxy:
        client, counted = new_client(f"http://127.0.0.1:{proxy.port}", token, figures)
        customers = [f"lossy-{i}" for i in range(16)]
        with client, ThreadPoolExecutor(4) as pool:
            placed = list(pool.map(lambda c: order_and_pay(client, c), customers))

    found = figures.audited(audit(database_url, orders=customers, paid=customers))
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)
    assert proxy.dropped >= 20
    assert proxy.reset >= 5
    assert figures.retries + counted.transport.policy_lost >= proxy.dropped + proxy.reset
    # An order whose first answer was lost was answered by a replay.
    assert any(result.replayed for result in placed)
    assert [r.body["order"]["customerId"] for r in placed] == customers


def test_client_resumes_an_intent_after_its_process_died(
    deployment: Deployment, token: str, database_url: str, tmp_path: Path
) -> None:
    """The key store keeps the intent's key: a restarted process sends the same one."""
    figures = Figures("client: process restarted with its key store")
    deployment.start_web()
    store_path = tmp_path / "keys.sqlite3"
    with FaultProxy(deployment.service.address, mode=Mode.DROP_ANSWERS) as proxy:
        url = f"http://127.0.0.1:{proxy.port}"
        # The first process: every answer is lost, and it gives up (as if it died).
        first, first_counted = new_client(
            url,
            token,
            figures,
            retry=RetryPolicy(max_attempts=2, base_delay=0.01),
            key_store=SQLiteKeyStore(store_path),
        )
        with first, pytest.raises(RetriesExhausted):
            first.create_order(customer_id="resumed", currency="RUB", items=[ITEM], intent="cart-1")
        assert audit(database_url, orders=["resumed"]).lost == 0  # it did execute

        proxy.mode = Mode.PASS
        second, _ = new_client(url, token, figures, key_store=SQLiteKeyStore(store_path))
        with second:
            resumed = second.create_order(
                customer_id="resumed", currency="RUB", items=[ITEM], intent="cart-1"
            )

    found = figures.audited(audit(database_url, orders=["resumed"]))
    assert resumed.replayed
    assert resumed.status == 201
    assert (found.duplicates, found.lost) == (0, 0)
    # Its two attempts' answers, and that of its read of the policy before them.
    assert first_counted.transport.policy_lost == 1
    assert proxy.dropped == 2 + 1


def test_client_rides_out_a_service_restart(
    deployment: Deployment, token: str, database_url: str
) -> None:
    figures = Figures("client: gunicorn restarted mid-run")
    deployment.start_web()
    deployment.start_worker()
    client, counted = new_client(deployment.service.base_url, token, figures)
    customers = [f"restart-{i}" for i in range(24)]
    with client, ThreadPoolExecutor(3) as pool:
        running = [pool.submit(order_and_pay, client, c) for c in customers[:-1]]
        wait_for(
            lambda: audit(database_url, orders=customers).lost,
            lambda lost: lost <= 20,
            30,
            what="all but 20 of the orders placed",
        )
        assert deployment.web is not None
        deployment.web.terminate()
        deployment.web.wait()
        stopped_at = time.monotonic()
        # One action starts while nothing listens: it is refused until gunicorn is back.
        running.append(pool.submit(order_and_pay, client, customers[-1]))
        wait_for(
            lambda: sorted(set(counted.reasons)),
            lambda reasons: "ConnectError" in reasons,
            30,
            what="a retry after a refused connection",
        )
        deployment.start_web()
        figures.recovery_s = time.monotonic() - stopped_at  # how long nothing listened
        for action in running:
            action.result()

    found = figures.audited(audit(database_url, orders=customers, paid=customers))
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)


def test_the_default_budget_outlasts_a_failover_long_outage(
    deployment: Deployment, token: str, database_url: str
) -> None:
    # The default RetryPolicy, as an application gets it: nothing listens
    # for as long as a failover leaves commands unanswered at worst
    # (docs/RELIABILITY.md: 21.5 s), far past the eight attempts a
    # count-bounded budget had.
    figures = Figures("client: default budget, 21.5 s with nothing listening")
    deployment.start_web()
    client, counted = new_client(deployment.service.base_url, token, figures, retry=RetryPolicy())
    assert deployment.web is not None
    deployment.web.terminate()
    deployment.web.wait()
    stopped_at = time.monotonic()
    with client, ThreadPoolExecutor(1) as pool:
        placed = pool.submit(
            client.create_order, customer_id="outlasted", currency="RUB", items=[ITEM]
        )
        wait_for(lambda: len(counted.reasons), lambda retries: retries > 8, 30, what="9 retries")
        # The outage's length is the scenario itself, not a wait for an event.
        time.sleep(max(0.0, FAILOVER_WORST_S - (time.monotonic() - stopped_at)))
        deployment.start_web()
        figures.recovery_s = time.monotonic() - stopped_at
        result = placed.result(timeout=RetryPolicy().deadline)

    found = figures.audited(audit(database_url, orders=["outlasted"]))
    assert result.status == 201
    assert figures.recovery_s >= FAILOVER_WORST_S
    assert set(counted.reasons) == {"ConnectError"}
    assert (found.duplicates, found.lost) == (0, 0)


def test_client_waits_out_a_killed_worker(
    deployment: Deployment, token: str, database_url: str
) -> None:
    figures = Figures("client: worker killed mid-charge")
    deployment.start_web()
    # A slow provider, so that the worker is killed mid-call.
    doomed = deployment.start_worker(PAYMENT_PROVIDER_LATENCY="2")
    client, _ = new_client(deployment.service.base_url, token, figures)
    customers = ["killed-1", "killed-2"]
    with client:
        orders = [
            client.create_order(customer_id=c, currency="RUB", items=[ITEM]).body["order"]
            for c in customers
        ]
        accepted = [
            client.pay(
                order_id=o["id"],
                amount=o["totalAmount"],
                currency="RUB",
                payment_method="pm_card_ok",
            )
            for o in orders
        ]
        wait_for(
            lambda: claimed_operations(database_url),
            lambda claimed: len(claimed) == 1,
            what="the doomed worker holding an operation",
        )
        sigkill(doomed)
        deployment.start_worker()
        available_at = time.monotonic()
        finished = [client.wait(a.body, timeout=60) for a in accepted]
    figures.recovery_s = seconds_until_finished(database_url, since=available_at, within_s=20)

    found = figures.audited(audit(database_url, orders=customers, paid=customers))
    assert [op["status"] for op in finished] == ["succeeded", "succeeded"]
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)
