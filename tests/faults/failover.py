"""The service on a replicated PostgreSQL, under load, and what a failover did to what it promised.

:func:`replicated_service` starts the service as a deployment runs it on a
Patroni cluster (tests/support/patroni.py): gunicorn and a Celery worker on
the multi-host ``DATABASE_URL``, a Redis of their own, and the provider
simulator's ledger in a PostgreSQL of its own, outside the cluster, where a
real provider's records would be (``PROVIDER_DATABASE_URL``). :class:`Load`
places and pays orders from several threads through clients that keep their
keys, and records every acknowledgement the service gave. After the fault,
:meth:`Load.settle` does what those clients would do next: it polls every
accepted payment's operation to its end, and sends again, under the same
key, a command whose result the service no longer knows. :func:`audit`
then counts, from the database and the provider's ledger, what was
acknowledged and lost, what happened twice, and what never ended.

The scenarios (tests/faults/test_failover.py) and the asynchronous
demonstration (tests/bench/failover.py) share all of this.
"""

import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import requests

from tests.faults.harness import REPORT, Deployment, Figures, RetryingClient
from tests.support.faults import PostgresCluster, RedisServer
from tests.support.live import base_env, manage
from tests.support.patroni import PatroniCluster
from tests.support.waits import Answer, wait_for, wait_until

# Threads placing and paying orders at once: enough that a kill always meets
# commands in flight, few enough for gunicorn's threads on a 2-core machine.
LOAD_THREADS = 4


@dataclass
class ReplicatedService:
    """The service running on a Patroni cluster, its provider's ledger kept outside it."""

    cluster: PatroniCluster
    deployment: Deployment
    token: str
    ledger_url: str

    @property
    def database_url(self) -> str:
        """The service's database through the multi-host URL: whichever node is primary."""
        return self.cluster.url("orders")


@contextmanager
def replicated_service(
    var_dir: Path, *, synchronous: bool = True, link_delay_s: float = 0.0
) -> Iterator[ReplicatedService]:
    """A Patroni cluster, the service's database on it, gunicorn and a worker started.

    ``link_delay_s`` holds the WAL a standby reads that long on its way
    (tests.support.patroni.PatroniNode).
    """
    with (
        PatroniCluster(synchronous=synchronous, link_delay_s=link_delay_s) as cluster,
        PostgresCluster() as provider,
        RedisServer() as broker,
    ):
        cluster.create_database("orders")
        provider.create_database("provider")
        service_env = base_env(
            DATABASE_URL=cluster.url("orders"),
            PROVIDER_DATABASE_URL=provider.url("provider"),
            CELERY_BROKER_URL=broker.url(),
            SECRET_KEY=secrets.token_urlsafe(50),
        )
        # As a deployment does it, through the multi-host URL.
        manage("migrate", "--verbosity=0", env=service_env)
        manage("seed_demo", env=service_env)
        token = manage("create_api_client", "failover", "client", env=service_env).splitlines()[-1]
        deployment = Deployment(env=service_env, var_dir=var_dir)
        try:
            deployment.start_web()
            deployment.start_worker()
            yield ReplicatedService(cluster, deployment, token, provider.url("provider"))
        finally:
            deployment.close()


@dataclass
class Acknowledged:
    """What the service told the clients it had done: every command's 2xx answer, by id."""

    # orderId → customerId (the order's key)
    orders: dict[str, str] = field(default_factory=dict)
    # paymentId → orderId
    payments: dict[str, str] = field(default_factory=dict)
    # paymentId → operationId
    operations: dict[str, str] = field(default_factory=dict)
    # orderId → the order's body as the service answered it, to pay it again
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Of these, the commands that clients sent again after the fault, having
    # found what they had been told of gone (Load.settle).
    resent: int = 0

    def count(self) -> int:
        return len(self.orders) + len(self.payments)


class Load:
    """Orders placed and paid from ``LOAD_THREADS`` threads, until :meth:`stop`.

    Each thread is a client that keeps its keys (:class:`RetryingClient`):
    it retries one command until it gets a final answer, then goes on to the
    next. Every acknowledgement lands in :attr:`acknowledged`; every attempt,
    with when it was sent and answered, in the client's ``attempts``.
    """

    def __init__(self, service: ReplicatedService, figures: Figures) -> None:
        self.service = service
        self.client = RetryingClient(
            service.deployment.service.base_url, service.token, figures, deadline_s=120
        )
        self.acknowledged = Acknowledged()
        # Final answers that were neither the order nor the payment: a
        # payment of an order the service no longer knows, say.
        self.refused: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(LOAD_THREADS)
        self._threads: list[Future[None]] = []

    def start(self) -> None:
        self._threads = [self._pool.submit(self._run) for _ in range(LOAD_THREADS)]

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.result()
        self._pool.shutdown()

    def wait_for(self, condition: Callable[[], bool], timeout: float, *, what: str) -> None:
        """Until ``condition`` holds, while the load runs; fails at once if a load thread failed."""

        def holds() -> Answer:
            for thread in self._threads:
                if thread.done():
                    thread.result()  # raises what ended it
            return Answer(condition(), self.progress())

        wait_until(holds, timeout, interval=0.05, what=what)

    def progress(self) -> str:
        """What the load has done so far, and the statuses of its last attempts (- for none)."""
        with self._lock:
            orders, payments = len(self.acknowledged.orders), len(self.acknowledged.payments)
            refused = self.refused[-3:]
        last = [a.status or "-" for a in self.client.attempts[-10:]]
        return (
            f"acknowledged {orders} orders and {payments} payments, refused {refused};"
            f" the last attempts: {' '.join(map(str, last))}"
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            order = self._place()
            if order is not None:
                self._pay(order)

    def _place(self, key: str | None = None) -> dict[str, Any] | None:
        key = key or f"order-{secrets.token_hex(8)}"
        body = {"customerId": key, "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"}
        answer = self.client.command("POST", "/v1/orders", body, key=key)
        if answer.status_code != 201:
            self._refused(answer)
            return None
        order: dict[str, Any] = answer.json()["order"]
        with self._lock:
            self.acknowledged.orders[order["id"]] = key
            self.acknowledged.bodies[order["id"]] = order
        return order

    def _pay(self, order: dict[str, Any]) -> str | None:
        """Pay ``order`` under its payment's key; the payment's id if it was accepted."""
        body = {
            "orderId": order["id"],
            "amount": order["totalAmount"],
            "currency": order["currency"],
            "paymentMethod": "pm_card_ok",
        }
        answer = self.client.command("POST", "/v1/payments", body, key=f"pay-{order['id']}")
        if answer.status_code != 202:
            self._refused(answer)
            return None
        accepted = answer.json()
        with self._lock:
            self.acknowledged.payments[accepted["paymentId"]] = order["id"]
            self.acknowledged.operations[accepted["paymentId"]] = accepted["operationId"]
        return str(accepted["paymentId"])

    def _refused(self, answer: requests.Response) -> None:
        with self._lock:
            self.refused.append(f"{answer.status_code} {answer.text[:200]}")

    def settle(self) -> int:
        """Do what each client would do next, and follow every payment to its end.

        Returns how many acknowledged orders and payments the service no
        longer knew. A client finds out by reading them: ``404``. One that
        keeps its keys then sends the command again under the same key,
        which the service has forgotten with the rest: an order is placed
        again (and paid again, if it had been paid), a payment is made again.
        """
        gone, before = 0, self.acknowledged.count()
        paid = {order_id: payment for payment, order_id in self.acknowledged.payments.items()}
        for order_id, key in list(self.acknowledged.orders.items()):
            if self._known(f"/v1/orders/{order_id}"):
                continue
            gone += 1
            again = self._place(key)
            if again is not None and order_id in paid:
                self._pay(again)
        for payment_id, operation_id in list(self.acknowledged.operations.items()):
            if self._operation_status(operation_id) is not None:
                continue
            gone += 1
            order_id = self.acknowledged.payments[payment_id]
            if self._known(f"/v1/orders/{order_id}"):
                self._pay(self.acknowledged.bodies[order_id])
        # The payments made again end too.
        for operation_id in list(self.acknowledged.operations.values()):
            self._operation_status(operation_id)
        self.acknowledged.resent = self.acknowledged.count() - before
        return gone

    def _known(self, path: str) -> bool:
        """Whether the service knows the resource at ``path`` (not ``404``), asked until it says."""
        headers = {"Authorization": f"Bearer {self.service.token}"}
        answer = wait_for(
            lambda: requests.get(
                self.service.deployment.service.url(path), headers=headers, timeout=15
            ),
            lambda answer: answer.status_code in (200, 404),
            120,
            interval=0.2,  # a client's pause before it asks again
            what=f"GET {path} answering 200 or 404",
            ignoring=(requests.RequestException,),
        )
        return answer.status_code == 200

    def _operation_status(self, operation_id: str) -> str | None:
        """The operation's final status, polled as a client does; None if it is unknown."""
        headers = {"Authorization": f"Bearer {self.service.token}"}
        url = self.service.deployment.service.url(f"/v1/operations/{operation_id}")
        answer = wait_for(
            lambda: requests.get(url, headers=headers, timeout=15),
            lambda answer: (
                answer.status_code == 404
                or (answer.status_code == 200 and answer.json()["status"] != "processing")
            ),
            120,
            interval=0.5,  # a client's pause (Retry-After, at most half a second here)
            what=f"operation {operation_id} ending or unknown",
            ignoring=(requests.RequestException,),
        )
        return None if answer.status_code == 404 else str(answer.json()["status"])


@dataclass(frozen=True)
class FailoverAudit:
    """What the database and the provider's ledger say of what the clients were told."""

    # Orders and payments the clients were told of under load.
    acknowledged: int
    # Acknowledged orders and payments the database no longer has.
    lost: int
    # Commands the clients sent again, under the same keys, having found
    # theirs gone.
    resent: int
    # A customer (an order's key) with more than one order.
    duplicates: int
    # An order the provider charged more than once.
    double_charges: int
    # A charge the provider made for a payment the database no longer has.
    orphan_charges: int
    # Operations still processing, and keys without their answer.
    stuck: int


def audit(service: ReplicatedService, acknowledged: Acknowledged) -> FailoverAudit:
    """What became of every acknowledgement, from the primary and the provider's own ledger.

    A double charge is a customer (an order's key: one intended purchase)
    charged more than once, whatever became of the orders and payments in
    between.
    """
    customers = sorted(set(acknowledged.orders.values()))
    with psycopg.connect(service.database_url, autocommit=True) as db:
        kept_orders: dict[str, str] = dict(
            db.execute(
                "SELECT id, customer_id FROM orders_order WHERE customer_id = ANY(%s)",
                [customers],
            ).fetchall()
        )
        # Every payment of these customers' orders, acknowledged or made by a retry.
        order_of: dict[str, str] = dict(
            db.execute(
                "SELECT p.id, o.id FROM orders_payment p JOIN orders_order o"
                " ON o.internal_id = p.order_id WHERE o.customer_id = ANY(%s)",
                [customers],
            ).fetchall()
        )
        stuck = _count(db, "SELECT count(*) FROM operations_operation WHERE status = 'processing'")
        stuck += _count(
            db,
            "SELECT count(*) FROM idempotency_idempotencykey k WHERE NOT EXISTS"
            " (SELECT 1 FROM idempotency_storedanswer a WHERE a.key_id = k.id)",
        )
    with psycopg.connect(service.ledger_url, autocommit=True) as ledger:
        charged = [
            row[0]
            for row in ledger.execute(
                "SELECT payment_id FROM provider_ledgerentry WHERE kind = 'charge' AND succeeded"
            )
        ]
    # What the database lost is known by what the clients were told.
    customer_of = {**acknowledged.orders, **kept_orders}
    charges = Counter(
        customer_of[order_id]
        for payment_id in charged
        if (order_id := order_of.get(payment_id) or acknowledged.payments.get(payment_id))
    )
    return FailoverAudit(
        acknowledged=acknowledged.count() - acknowledged.resent,
        resent=acknowledged.resent,
        lost=len(acknowledged.orders.keys() - kept_orders.keys())
        + len(acknowledged.payments.keys() - order_of.keys()),
        duplicates=sum(n - 1 for n in Counter(kept_orders.values()).values()),
        double_charges=sum(n - 1 for n in charges.values()),
        orphan_charges=sum(1 for payment_id in charged if payment_id not in order_of),
        stuck=stuck,
    )


def _count(db: "psycopg.Connection[Any]", query: str) -> int:
    row = db.execute(query).fetchone()
    return 0 if row is None else int(row[0])


@dataclass
class Recovery:
    """What clients saw of a fault that began at ``since`` (monotonic), in seconds from it."""

    since: float
    # The first attempt sent after the fault that failed: a 5xx, or no answer.
    first_failure_s: float | None = None
    # The first success after the last failure: the service back for good.
    first_success_s: float | None = None
    # The moment no operation was processing any more.
    all_ended_s: float | None = None
    # The longest any attempt sent after the fault waited for its answer.
    longest_answer_s: float = 0.0
    # Attempts sent after the fault that were answered 503 ServiceUnavailable.
    unavailable: int = 0
    # Attempts (whenever sent) answered with another 5xx: a failure that
    # reached a client as something other than "retry later".
    other_errors: int = 0

    def read(self, client: RetryingClient) -> None:
        """Take the failures, the first success and the longest wait from the client's attempts."""
        after = [a for a in client.attempts if a.sent >= self.since]
        failed = [a for a in after if a.status is None or a.status >= 500]
        if failed:
            self.first_failure_s = min(a.sent for a in failed) - self.since
            # Back for good: the first success of an attempt sent after the
            # last failure. (A command can still succeed in the instant after
            # a kill, on a backend not yet dead whose commit the standby has.)
            last_failure = max(a.sent for a in failed)
            back = [
                a.answered
                for a in after
                if a.sent >= last_failure and a.status is not None and a.status < 300
            ]
            self.first_success_s = min(back) - self.since if back else None
        self.longest_answer_s = max((a.answered - a.sent for a in after), default=0.0)
        self.unavailable = sum(1 for a in after if a.status == 503)
        self.other_errors = sum(
            1
            for a in client.attempts
            if a.status is not None and a.status > 500 and a.status != 503
        )


@dataclass
class FailoverFigures:
    """One line of a failover scenario's figures, printed with the other scenarios'."""

    scenario: str
    figures: Figures
    recovery: Recovery
    found: FailoverAudit | None = None
    goal_s: float | None = None
    # What the scenario alone measured, said in words.
    extra: str = ""

    def line(self) -> str:
        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f} s"

        found = self.found
        assert found is not None
        goal = "" if self.goal_s is None else f" (goal {self.goal_s:g} s)"
        return (
            f"{self.scenario}: acknowledged {found.acknowledged}, lost {found.lost}"
            f" (sent again {found.resent}),"
            f" duplicates {found.duplicates}, double charges {found.double_charges},"
            f" orphan charges {found.orphan_charges}, stuck {found.stuck};"
            f" retries {self.figures.retries},"
            f" 503 {self.recovery.unavailable},"
            f" longest answer {seconds(self.recovery.longest_answer_s)};"
            f" failing from {seconds(self.recovery.first_failure_s)}"
            f" to {seconds(self.recovery.first_success_s)},"
            f" last operation ended after {seconds(self.recovery.all_ended_s)}{goal}"
            + (f"; {self.extra}" if self.extra else "")
        )

    def report(self, found: FailoverAudit) -> FailoverAudit:
        self.found = found
        REPORT.append(self.line())
        return found
