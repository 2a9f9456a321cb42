"""The fault-injection harness: real processes, one real fault, clients that keep their keys.

A scenario starts the processes it needs (:class:`Deployment`), drives
traffic through a :class:`RetryingClient` (a new key per intended action,
the same key for every retry of it), injects its fault, and then audits
the database and the provider's ledger (:func:`audit`): every intended
action happened once, none is lost, nothing is left processing. Each
scenario reports one line of :class:`Figures`.
"""

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
import requests
import urllib3
from django.conf import settings

from tests.support import servers
from tests.support.live import BIN, ROOT, LiveService, free_port, wait_until_healthy
from tests.support.waits import Answer, describe, wait_until

# The figures of every scenario run, printed at the end of the session
# (tests/faults/conftest.py).
REPORT: list[str] = []

# The brokers a scenario may run on (docs/DEPLOYING.md, "Which broker"):
# ``@pytest.mark.parametrize("broker_kind", BROKERS)`` runs it on each, on a
# Redis of its own or a RabbitMQ virtual host of its own (the ``broker``
# fixture, tests/faults/conftest.py).
BROKERS = ("redis", "rabbitmq")


class Broker(Protocol):
    """A scenario's own broker (tests/support/faults.py): its URL, and stopping and starting it."""

    def url(self) -> str: ...
    def stop(self) -> None: ...
    def start(self) -> None: ...


# What a retrying client waits at most between two attempts (seconds),
# whatever Retry-After says: the scenarios measure recovery in seconds.
_MAX_PAUSE_S = 1.0


@dataclass
class Figures:
    """What one scenario sent and what the audit found."""

    scenario: str
    sent: int = 0
    retries: int = 0
    server_errors: int = 0
    # Attempts that reached the server and got no answer (cut, reset, dropped).
    unanswered: int = 0
    duplicates: int = 0
    lost: int = 0
    stuck: int = 0
    recovery_s: float | None = None
    goal_s: float | None = None

    def line(self) -> str:
        recovery = "-" if self.recovery_s is None else f"{self.recovery_s:.1f}"
        goal = "" if self.goal_s is None else f" (goal {self.goal_s:g})"
        return (
            f"{self.scenario}: sent {self.sent}, retries {self.retries},"
            f" duplicates {self.duplicates}, lost {self.lost}, stuck {self.stuck},"
            f" 5xx {self.server_errors}, unanswered {self.unanswered},"
            f" recovery {recovery} s{goal}"
        )

    def audited(self, found: "Audit") -> "Audit":
        """Take the audit's counts into these figures, and report them."""
        self.duplicates, self.lost, self.stuck = found.duplicates, found.lost, found.stuck
        REPORT.append(self.line())
        return found


@dataclass(frozen=True)
class Attempt:
    """One attempt of a command: when it was sent and answered (monotonic), and its status."""

    sent: float
    answered: float
    # None when no answer came (refused, reset, timed out).
    status: int | None


@dataclass
class RetryingClient:
    """A client that retries a command with the same key until it gets a final answer.

    It retries what the API says is worth retrying: no answer at all
    (refused, reset, timed out), a 5xx, ``409 IdempotencyKeyInProgress`` and
    ``429``, after ``Retry-After`` (at most a second here) or a short
    backoff. Every attempt opens a new connection, as after a failure.
    """

    base_url: str
    token: str
    figures: Figures
    deadline_s: float = 90.0
    # Every attempt, in the order they ended (threads may share the client).
    attempts: list[Attempt] = field(default_factory=list)

    def command(self, method: str, path: str, body: Any, *, key: str) -> requests.Response:
        """The final answer to one intended command."""
        deadline = time.monotonic() + self.deadline_s
        for attempt in range(10_000):
            if attempt:
                self.figures.retries += 1
            self.figures.sent += 1
            sent = time.monotonic()
            try:
                response = requests.request(
                    method,
                    self.base_url + path,
                    json=body,
                    headers={"Authorization": f"Bearer {self.token}", "Idempotency-Key": key},
                    timeout=15,
                )
            except requests.RequestException as exc:
                last: object = exc
                self.attempts.append(Attempt(sent, time.monotonic(), None))
                if not _never_connected(exc):
                    self.figures.unanswered += 1
                pause = min(0.05 * 2**attempt, _MAX_PAUSE_S)
            else:
                last = response
                self.attempts.append(Attempt(sent, time.monotonic(), response.status_code))
                if response.status_code >= 500:
                    self.figures.server_errors += 1
                if not _worth_retrying(response):
                    return response
                pause = min(float(response.headers.get("Retry-After", 1)), _MAX_PAUSE_S)
            assert time.monotonic() + pause < deadline, (
                f"{method} {path} got no final answer in {self.deadline_s:g} s"
                f" ({attempt + 1} attempts); the last: {describe(last)}\n{servers.evidence()}"
            )
            time.sleep(pause)  # a client's backoff, not a wait for an event
        raise AssertionError("unreachable")

    def place_order(self, customer_id: str | None = None) -> dict[str, Any]:
        """An order of one ABC under a new key; its customerId is the key, for the audit."""
        key = customer_id or f"order-{uuid.uuid4().hex}"
        body = {"customerId": key, "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"}
        response = self.command("POST", "/v1/orders", body, key=key)
        assert response.status_code == 201, response.text
        order: dict[str, Any] = response.json()["order"]
        return order

    def order_and_pay(self, _: object = None) -> dict[str, Any]:
        """Place an order and pay it, each under a key of its own; the order.

        The ignored argument lets ``pool.map`` drive it.
        """
        order = self.place_order()
        self.pay(order)
        return order

    def pay(self, order: dict[str, Any]) -> dict[str, Any]:
        """Pay ``order`` in full under a new key; the 202 answer."""
        body = {
            "orderId": order["id"],
            "amount": order["totalAmount"],
            "currency": order["currency"],
            "paymentMethod": "pm_card_ok",
        }
        response = self.command("POST", "/v1/payments", body, key=f"pay-{order['id']}")
        assert response.status_code == 202, response.text
        accepted: dict[str, Any] = response.json()
        return accepted


def _worth_retrying(response: requests.Response) -> bool:
    if response.status_code >= 500 or response.status_code == 429:
        return True
    return (
        response.status_code == 409
        and response.headers.get("Content-Type") == "application/problem+json"
        and response.json().get("error") == "IdempotencyKeyInProgress"
    )


def _never_connected(exc: requests.RequestException) -> bool:
    """The connection was refused: the request never reached a server."""
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


@dataclass
class Deployment:
    """gunicorn and Celery workers of one scenario, started, stopped and killed one by one."""

    env: Mapping[str, str]
    var_dir: Path
    port: int = field(default_factory=free_port)
    web: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def service(self) -> LiveService:
        return LiveService(base_url=f"http://127.0.0.1:{self.port}")

    def _env(self, **overrides: str) -> dict[str, str]:
        return {**self.env, "VAR_DIR": str(self.var_dir), "DEBUG": "0", **overrides}

    def start_web(self, *, workers: int = 2, threads: int = 8, **env: str) -> None:
        """gunicorn as deployed (config/gunicorn.py), healthy when this returns."""
        self.web = servers.start(
            "gunicorn",
            [str(BIN / "gunicorn"), "-c", "config/gunicorn.py", "config.wsgi:application"],
            log=self.var_dir / "web.log",
            cwd=ROOT,
            env=self._env(
                BIND=f"127.0.0.1:{self.port}",
                WEB_CONCURRENCY=str(workers),
                WEB_THREADS=str(threads),
                **env,
            ),
        )
        wait_until_healthy(self.service, [self.web])

    def web_worker_pids(self) -> list[int]:
        """The pids of gunicorn's worker processes (the master's children)."""
        assert self.web is not None
        pid = self.web.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return sorted(int(child) for child in children)

    def start_worker(
        self, *, pool: str = "solo", concurrency: int = 1, queue: str | None = None, **env: str
    ) -> subprocess.Popen[bytes]:
        """A Celery worker, connected when this returns.

        One process, one task at a time, unless ``pool`` says otherwise:
        ``pool="prefork", concurrency=2`` runs two tasks at once in child
        processes, as docker-compose.yml's worker does (on two cores). It
        runs in a session of its own, so that a kill reaches it alone.
        It consumes every queue, as a worker started without ``-Q`` does,
        unless ``queue`` names the one it takes (docs/DEPLOYING.md, "Workers").
        """
        log = self.var_dir / f"worker-{len(self.workers)}.log"
        # solo has no concurrency to set: its one task runs in the worker.
        concurrent = [] if pool == "solo" else [f"--concurrency={concurrency}"]
        queues = [] if queue is None else ["-Q", queue]
        # A name of its own: on RabbitMQ a worker's control queue is exclusive
        # to its node name, and a second worker of the same name exits.
        name = ["-n", f"{queue or 'worker'}-{len(self.workers)}@%h"]
        worker = servers.start(
            f"celery worker {len(self.workers)}",
            [
                str(BIN / "celery"),
                "-A",
                "config",
                "worker",
                f"--pool={pool}",
                *concurrent,
                *queues,
                *name,
                "--without-mingle",
                "--without-gossip",
                "--loglevel=INFO",
            ],
            log=log,
            cwd=ROOT,
            env=self._env(**env),
            start_new_session=True,
        )
        self.workers.append(worker)
        _wait_for_line(log, " ready.", worker)
        return worker

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``manage.py`` as an operator runs it on a node of this deployment; its exit unchecked."""
        return subprocess.run(
            [str(BIN / "python"), "manage.py", *args],
            cwd=ROOT,
            env=self._env(),
            capture_output=True,
            text=True,
            check=False,
        )

    def start_deliveries_worker(self, *, slots: int) -> subprocess.Popen[bytes]:
        """A worker of webhook deliveries alone, as docs/DEPLOYING.md runs one.

        ``slots`` threads (an attempt waits on a receiver, not on a CPU),
        more than a tenant's ``WEBHOOK_TENANT_CONCURRENCY``: the rule that
        keeps one tenant's slow receivers from holding them all.
        """
        bound = int(self.env.get("WEBHOOK_TENANT_CONCURRENCY", settings.WEBHOOK_TENANT_CONCURRENCY))
        assert slots > bound, f"{slots} delivery slots, not more than a tenant's {bound}"
        return self.start_worker(queue=settings.WEBHOOK_QUEUE, pool="threads", concurrency=slots)

    def wait_for_worker_line(
        self, worker: subprocess.Popen[bytes], text: str, *, within_s: float = 30
    ) -> None:
        """Until ``worker``'s log has ``text``; fails at once if the worker exits."""
        _wait_for_line(
            self.var_dir / f"worker-{self.workers.index(worker)}.log", text, worker, within_s
        )

    @contextmanager
    def paused(self, workers: Sequence[subprocess.Popen[bytes]]) -> Iterator[None]:
        """``workers`` frozen (SIGSTOP to each one's session) while the block runs.

        A frozen worker takes nothing from the queue and sweeps nothing, as
        one whose machine is suspended; on RabbitMQ it keeps its connection
        and the messages already delivered to it. They go on (SIGCONT) when
        the block ends, however it ends.
        """
        for worker in workers:
            os.killpg(worker.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for worker in workers:
                os.killpg(worker.pid, signal.SIGCONT)

    def close(self) -> None:
        servers.stop([p for p in [self.web, *self.workers] if p is not None])


def _wait_for_line(
    log: Path, text: str, process: subprocess.Popen[bytes], within_s: float = 30
) -> None:
    def logged() -> Answer:
        assert process.poll() is None, f"the process exited before {text!r}\n{servers.evidence()}"
        lines = log.read_text(errors="replace").splitlines()
        return Answer(any(text in line for line in lines), f"its last line: {lines[-1:]}")

    # A worker announces that it is connected and consuming in its log alone.
    wait_until(logged, within_s, interval=0.05, what=f"{text!r} in {log}")


def sigkill(process: subprocess.Popen[bytes] | int) -> None:
    """Kill a process at once, as a crash or the OOM killer would."""
    if isinstance(process, int):
        os.kill(process, signal.SIGKILL)
    else:
        servers.kill(process)


@dataclass(frozen=True)
class Audit:
    duplicates: int
    lost: int
    stuck: int


def audit(database_url: str, *, orders: Sequence[str], paid: Sequence[str] = ()) -> Audit:
    """What the database and the provider's ledger say of the intended actions.

    ``orders`` are the customer ids of the orders intended (one order
    each), ``paid`` those of the orders a payment was intended for (one
    charge each). A duplicate is a second order or a second charge; a lost
    action is an order missing or a payment never charged; stuck is an
    operation still processing or a key without its answer.
    """
    with psycopg.connect(database_url, autocommit=True) as db:
        per_customer: dict[str, int] = dict(
            db.execute(
                "SELECT customer_id, count(*) FROM orders_order"
                " WHERE customer_id = ANY(%s) GROUP BY customer_id",
                [list(orders)],
            ).fetchall()
        )
        charges: dict[str, int] = dict(
            db.execute(
                "SELECT o.customer_id, count(*) FROM provider_ledgerentry l"
                " JOIN orders_payment p ON p.id = l.payment_id"
                " JOIN orders_order o ON o.internal_id = p.order_id"
                " WHERE l.kind = 'charge' AND l.succeeded AND o.customer_id = ANY(%s)"
                " GROUP BY o.customer_id",
                [list(paid)],
            ).fetchall()
        )
        (processing,) = db.execute(
            "SELECT count(*) FROM operations_operation WHERE status = 'processing'"
        ).fetchone() or (0,)
        (unanswered,) = db.execute(
            "SELECT count(*) FROM idempotency_idempotencykey k WHERE NOT EXISTS"
            " (SELECT 1 FROM idempotency_storedanswer a WHERE a.key_id = k.id)"
        ).fetchone() or (0,)
    duplicates = sum(n - 1 for n in per_customer.values()) + sum(n - 1 for n in charges.values())
    lost = sum(1 for c in orders if c not in per_customer) + sum(
        1 for c in paid if c not in charges
    )
    return Audit(duplicates=duplicates, lost=lost, stuck=processing + unanswered)


def seconds_until_finished(database_url: str, *, since: float, within_s: float) -> float:
    """Wait until no operation is processing; the seconds from ``since`` (monotonic).

    The database is the only place that knows; it is polled every 50 ms.
    """
    deadline = since + within_s + 30
    with psycopg.connect(database_url, autocommit=True) as db:
        while True:
            row = db.execute(
                "SELECT count(*) FROM operations_operation WHERE status = 'processing'"
            ).fetchone()
            if row is not None and row[0] == 0:
                return time.monotonic() - since
            assert time.monotonic() < deadline, (
                f"operations still processing {within_s + 30:g} s after the fault:"
                f" {row[0] if row else '?'}\n{servers.evidence()}"
            )
            time.sleep(0.05)


# What the scenarios read of the database while a fault is under way: it
# offers no event to wait on, so they poll these.


def _count(database_url: str, query: str, *params: object) -> int:
    with psycopg.connect(database_url, autocommit=True) as db:
        row = db.execute(query, params).fetchone()
    return 0 if row is None else int(row[0])


def waiting_on_a_lock(database_url: str) -> int:
    """How many connections to the database wait on a lock."""
    return _count(
        database_url,
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )


def payments_of(database_url: str, order_id: str) -> int:
    """How many payments of the order are committed."""
    return _count(
        database_url,
        "SELECT count(*) FROM orders_payment p"
        " JOIN orders_order o ON o.internal_id = p.order_id WHERE o.id = %s",
        order_id,
    )


def claimed_operations(database_url: str) -> list[str]:
    """The ids of the operations a worker holds now."""
    with psycopg.connect(database_url, autocommit=True) as db:
        rows = db.execute(
            "SELECT id FROM operations_operation"
            " WHERE status = 'processing' AND claimed_until > now()"
        ).fetchall()
    return [row[0] for row in rows]


def copies_published(database_url: str) -> tuple[int, int]:
    """(all, most of one operation's) messages published beyond each operation's first.

    A retry's message counts as one: the scenarios that read this retry nothing.
    """
    with psycopg.connect(database_url, autocommit=True) as db:
        row = db.execute(
            "SELECT coalesce(sum(publications - 1), 0), coalesce(max(publications - 1), 0)"
            " FROM operations_operation"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def operation_state(database_url: str, operation_id: str) -> tuple[str, int]:
    """(status, attempts) of one operation."""
    with psycopg.connect(database_url, autocommit=True) as db:
        row = db.execute(
            "SELECT status, attempts FROM operations_operation WHERE id = %s", [operation_id]
        ).fetchone()
    assert row is not None
    return row[0], row[1]
