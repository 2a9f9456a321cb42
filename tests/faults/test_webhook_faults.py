"""Webhooks under faults: a receiver away or slow, a worker killed, the broker down, retries.

Deliveries are at least once, and the consumer's inbox makes them once: the
receiver here is written as client/README.md writes one (the client's
``WebhookVerifier``, then a ``SQLiteInbox`` around the handler), and what
the scenarios count is how often the handler ran for each event id. The
feed (``GET /v1/events``, paged to the end) is where exactly once holds on
the service's side: one event per effect, audited against the orders, the
payments and the provider's ledger, however often the commands were sent.
"""

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from order_service_client import (
    DeliveryInProgress,
    SQLiteInbox,
    WebhookEvent,
    WebhookVerificationFailed,
    WebhookVerifier,
)

from tests.faults.harness import (
    REPORT,
    Deployment,
    Figures,
    RetryingClient,
    audit,
    seconds_until_finished,
    sigkill,
)
from tests.support import servers
from tests.support.concurrency import run_concurrently
from tests.support.faults import FaultProxy, Mode, RedisServer
from tests.support.live import LiveService
from tests.support.waits import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# The processes' webhook settings: receivers on 127.0.0.1, and a backoff of
# half a second rather than the production minute, so that an outage of
# seconds is ridden out within the scenario. Ten attempts, doubling from
# 0.5 s, span over four minutes: no delivery here runs out of them.
WEBHOOKS = {
    "WEBHOOK_ALLOW_PRIVATE_URLS": "true",
    "WEBHOOK_RETRY_BACKOFF": "0.5",
    "WEBHOOK_MAX_ATTEMPTS": "10",
    "WEBHOOK_TIMEOUT": "5",
}
BACKOFF_S = float(WEBHOOKS["WEBHOOK_RETRY_BACKOFF"])
# What a delivery due now may take beyond its due time: a sweep's interval
# (2 s) when its message was lost, and a single worker's queue.
DUE_SLACK_S = 5.0
# How long a held handler waits to be released before it gives up (500).
HOLD_LIMIT_S = 60.0


@dataclass(frozen=True)
class Arrival:
    """One POST that reached a receiver: what it carried and what it was answered."""

    webhook_id: str
    body: bytes
    status: int
    # When it arrived (monotonic).
    at: float


class Consumer:
    """A webhook receiver as client/README.md writes one, counting what it does.

    Each POST is verified with the endpoint's secret (``400`` if it does not
    verify), then handed to a ``SQLiteInbox`` whose handler counts the
    event: ``409`` while another delivery of the id runs it, ``500`` if the
    handler raised, ``200`` otherwise. ``delay`` makes every answer that
    much slower. With ``hold_first``, the first handler to run sets
    ``holding`` and waits for ``release``: a delivery that is being handled
    when its sender dies.
    """

    def __init__(self, inbox: Path, *, delay: float = 0.0, hold_first: bool = False) -> None:
        self.inbox = SQLiteInbox(inbox)
        # Set once the endpoint is made: its secret is in that answer only.
        self.verifier: WebhookVerifier | None = None
        self.delay = delay
        self.hold_first = hold_first
        self.holding = threading.Event()
        self.release = threading.Event()
        self.arrived = 0
        self.arrivals: list[Arrival] = []
        # Runs of the handler, per event id.
        self.handled: Counter[str] = Counter()
        self.in_flight = 0
        self.most_in_flight = 0
        self._changed = threading.Condition()
        consumer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = dict(self.headers.items())
                at = consumer.came()
                try:
                    status = consumer.answer(body, headers)
                finally:
                    consumer.went()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the worker that asked was killed meanwhile
                consumer.answered(Arrival(headers.get("webhook-id", ""), body, status, at))

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.address[1]}/hooks"

    def answer(self, body: bytes, headers: Mapping[str, str]) -> int:
        """The status the README's receiver answers this delivery."""
        if self.delay:
            time.sleep(self.delay)  # a receiver slow to answer, not a wait for an event
        if self.verifier is None:
            return 503
        try:
            event = self.verifier.verify(body, headers)
            self.inbox.handle(event.id, partial(self._handle, event))
        except WebhookVerificationFailed:
            return 400
        except DeliveryInProgress:
            return 409
        except Exception:
            return 500
        return 200

    def _handle(self, event: WebhookEvent) -> None:
        with self._changed:
            hold = self.hold_first and not self.holding.is_set()
            if hold:
                self.holding.set()
        if hold and not self.release.wait(HOLD_LIMIT_S):
            raise TimeoutError("the held handler was never released")
        with self._changed:
            self.handled[event.id] += 1
            self._changed.notify_all()

    def came(self) -> float:
        with self._changed:
            self.arrived += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self._changed.notify_all()
        return time.monotonic()

    def went(self) -> None:
        with self._changed:
            self.in_flight -= 1

    def answered(self, arrival: Arrival) -> None:
        with self._changed:
            self.arrivals.append(arrival)
            self._changed.notify_all()

    def wait(self, condition: Callable[[], bool], *, within_s: float, what: str) -> float:
        """Until ``condition`` holds (checked at each arrival and handling); the seconds it took."""
        started = time.monotonic()
        with self._changed:
            held = self._changed.wait_for(condition, within_s)
        assert held, f"{what}: not within {within_s:g} s"
        return time.monotonic() - started

    def statuses(self) -> list[int]:
        """The answers, in the order the deliveries arrived."""
        with self._changed:
            return [a.status for a in sorted(self.arrivals, key=lambda a: a.at)]


@contextmanager
def consuming(inbox: Path, *, delay: float = 0.0, hold_first: bool = False) -> Iterator[Consumer]:
    consumer = Consumer(inbox, delay=delay, hold_first=hold_first)
    thread = threading.Thread(target=consumer.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield consumer
    finally:
        consumer.release.set()
        consumer.server.shutdown()
        consumer.server.server_close()
        thread.join()


@dataclass
class WebhookFigures:
    """One scenario's line: what the feed holds, and what became of its deliveries."""

    scenario: str
    # Events in the feed, paged to the end.
    events: int = 0
    # Deliveries the service recorded as taken (a 2xx), over every endpoint.
    delivered: int = 0
    # POSTs that reached the receivers: every attempt that got through.
    received: int = 0
    # Events each receiver's handler ran for, summed over the receivers.
    handled: int = 0
    handled_twice: int = 0
    # An event id twice in the feed, or a second event of one effect.
    duplicates: int = 0
    # Events of the feed a receiver never handled.
    lost: int = 0
    # The scenario's own measure ("last delivered 4.1 s after it was back").
    measure: str = ""

    def line(self) -> str:
        return (
            f"webhooks, {self.scenario}: events {self.events}, delivered {self.delivered},"
            f" received {self.received}, handled {self.handled},"
            f" handled twice {self.handled_twice}, duplicates in feed {self.duplicates},"
            f" lost {self.lost}" + (f"; {self.measure}" if self.measure else "")
        )

    def tally(
        self, feed: Sequence[Mapping[str, Any]], consumers: Sequence[Consumer], delivered: int
    ) -> "WebhookFigures":
        """Count the feed and what the receivers made of it, and report the line."""
        ids = [event["id"] for event in feed]
        effects = [(event["type"], event["links"]["resource"]) for event in feed]
        self.events = len(feed)
        self.duplicates = (len(ids) - len(set(ids))) + (len(effects) - len(set(effects)))
        self.delivered = delivered
        self.received = sum(len(c.arrivals) for c in consumers)
        self.handled = sum(len(c.handled) for c in consumers)
        self.handled_twice = sum(n - 1 for c in consumers for n in c.handled.values())
        self.lost = sum(len(set(ids) - set(c.handled)) for c in consumers)
        REPORT.append(self.line())
        return self


@pytest.fixture
def deployment(deployment: Deployment) -> Deployment:
    """tests/faults/conftest.py's, each process it starts given the settings of WEBHOOKS."""
    deployment.env = {**deployment.env, **WEBHOOKS}
    return deployment


# --- The service, over HTTP and in its database ------------------------------


def subscribe(client: RetryingClient, consumer: Consumer, url: str | None = None) -> str:
    """An endpoint for every event type at ``url`` (the consumer's own by default); its id."""
    body = {"url": url or consumer.url, "eventTypes": ["*"]}
    response = client.command(
        "POST", "/v1/webhook-endpoints", body, key=f"subscribe-{uuid.uuid4().hex}"
    )
    assert response.status_code == 201, response.text
    consumer.verifier = WebhookVerifier(response.json()["secret"])
    return str(response.json()["id"])


def order_body(customer_id: str) -> dict[str, Any]:
    return {"customerId": customer_id, "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"}


def pay(client: RetryingClient, order: Mapping[str, Any], method: str = "pm_card_ok") -> int:
    """Pay ``order`` in full under the order's own key; the answer's status."""
    body = {
        "orderId": order["id"],
        "amount": order["totalAmount"],
        "currency": order["currency"],
        "paymentMethod": method,
    }
    return client.command("POST", "/v1/payments", body, key=f"pay-{order['id']}").status_code


def cancel(client: RetryingClient, order_id: str, *, key: str) -> int:
    return client.command("POST", f"/v1/orders/{order_id}/cancel", {}, key=key).status_code


def read_feed(service: LiveService, token: str) -> list[dict[str, Any]]:
    """Every event of the feed, oldest first, following ``next`` to the last page."""
    events: list[dict[str, Any]] = []
    # Small pages: an event must not show on two of them, nor fall between.
    path: str | None = "/v1/events?pageSize=7"
    while path is not None:
        response = requests.get(
            service.url(path), headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        assert response.status_code == 200, response.text
        page = response.json()
        events += page["results"]
        path = page["next"]
    return events


def settled_feed(service: LiveService, token: str, database_url: str) -> list[dict[str, Any]]:
    """The feed, once it shows every event the database holds.

    It shows an event once every older transaction has ended (in the whole
    PostgreSQL server), so it may lag a moment behind the table.
    """
    stored = scalar(database_url, "SELECT count(*) FROM events_event")
    return wait_for(
        lambda: read_feed(service, token),
        lambda feed: len(feed) >= stored,
        15,
        interval=0.1,
        what=f"the feed showing all {stored} events",
    )


def scalar(database_url: str, query: str, *params: object) -> int:
    with psycopg.connect(database_url, autocommit=True) as db:
        row = db.execute(query, params).fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


def rows(database_url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True) as db:
        return db.execute(query, params).fetchall()


def delivered(database_url: str) -> int:
    return scalar(database_url, "SELECT count(*) FROM events_delivery WHERE status = 'succeeded'")


def seconds_until_delivered(
    database_url: str, endpoint_id: str, events: int, *, since: float, within_s: float
) -> float:
    """Until the endpoint has taken ``events`` events; the seconds from ``since`` (monotonic).

    The database is the only place that knows; it is polled every 50 ms.
    A delivery that ends failed fails the wait at once.
    """
    deadline = time.monotonic() + within_s
    with psycopg.connect(database_url, autocommit=True) as db:
        while True:
            states: Counter[str] = Counter(
                dict(
                    db.execute(
                        "SELECT status, count(*) FROM events_delivery WHERE endpoint_id = %s"
                        " GROUP BY status",
                        [endpoint_id],
                    ).fetchall()
                )
            )
            assert states["failed"] == 0, (
                f"deliveries ended failed: {dict(states)}\n{servers.evidence()}"
            )
            if states["succeeded"] == events and states["pending"] == 0:
                return time.monotonic() - since
            assert time.monotonic() < deadline, (
                f"deliveries after {within_s:g} s: {dict(states)}\n{servers.evidence()}"
            )
            time.sleep(0.05)


def types_of(feed: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return dict(Counter(event["type"] for event in feed))


# --- The scenarios ----------------------------------------------------------


def test_receiver_down_then_back(
    deployment: Deployment, token: str, database_url: str, tmp_path: Path
) -> None:
    figures = WebhookFigures("receiver down then back")
    deployment.start_web()
    deployment.start_worker()
    client = RetryingClient(deployment.service.base_url, token, Figures("webhooks"))
    with (
        consuming(tmp_path / "inbox.sqlite3") as consumer,
        # Connections to the receiver refused, as when it is not running.
        FaultProxy(consumer.address, mode=Mode.DOWN) as link,
    ):
        endpoint = subscribe(client, consumer, f"http://127.0.0.1:{link.port}/hooks")
        down_at = time.monotonic()
        orders = [client.place_order() for _ in range(20)]
        paid = [pay(client, order) for order in orders[:12]]
        declined = [pay(client, order, "pm_card_declined") for order in orders[12:16]]
        cancelled = [cancel(client, o["id"], key=f"cancel-{o['id']}") for o in orders[16:]]
        # Down until every event is in and each delivery has been refused
        # three times: by then its backoff has doubled twice.
        wait_for(
            lambda: scalar(
                database_url, "SELECT count(*) FROM events_delivery WHERE attempts >= 3"
            ),
            lambda refused: refused == 40,
            60,
            interval=0.05,
            what="every event refused three times",
        )
        link.mode = Mode.PASS
        back_at = time.monotonic()
        recovery_s = seconds_until_delivered(database_url, endpoint, 40, since=back_at, within_s=60)
        attempts = [a for (a,) in rows(database_url, "SELECT attempts FROM events_delivery")]
    feed = settled_feed(deployment.service, token, database_url)

    # A delivery's last refused attempt was its next to last; the next
    # one came after that attempt's backoff, doubled at each refusal.
    due_s = max(BACKOFF_S * 2 ** (n - 2) for n in attempts)
    figures.scenario = f"receiver down {back_at - down_at:.1f} s then back"
    figures.measure = (
        f"refused attempts {sum(attempts) - len(attempts)}, last delivered {recovery_s:.1f} s"
        f" after it was back (its backoff then {due_s:g} s)"
    )
    figures.tally(feed, [consumer], delivered(database_url))
    assert (paid, declined, cancelled) == ([202] * 12, [202] * 4, [200] * 4)
    assert types_of(feed) == {
        "order.created": 20,
        "payment.succeeded": 12,
        "payment.failed": 4,
        "order.cancelled": 4,
    }
    assert min(attempts) >= 4
    assert set(consumer.statuses()) == {200}
    assert consumer.handled == Counter({event["id"]: 1 for event in feed})
    assert (figures.delivered, figures.duplicates, figures.lost) == (40, 0, 0)
    assert recovery_s <= due_s + DUE_SLACK_S


# After a worker dies, its operation waits for its lease to lapse
# (OPERATION_LEASE, 10 s) and for the next sweep (OPERATION_SWEEP_INTERVAL,
# 2 s); the attempt that takes it over takes over the dead attempt's hold of
# the endpoint too (events.delivery._take), and posts at once.
WORKER_KILLED_GOAL_S = 10.0 + 2 + 3


def test_worker_killed_mid_delivery(
    deployment: Deployment, token: str, database_url: str, tmp_path: Path
) -> None:
    figures = WebhookFigures("worker killed mid-delivery")
    deployment.start_web()
    doomed = deployment.start_worker()
    client = RetryingClient(deployment.service.base_url, token, Figures("webhooks"))
    with consuming(tmp_path / "inbox.sqlite3", hold_first=True) as consumer:
        endpoint = subscribe(client, consumer)
        client.place_order()
        assert consumer.holding.wait(30), "the delivery never reached the receiver"

        sigkill(doomed)
        killed_at = time.monotonic()
        deployment.start_worker()
        # The delivery again, while the first still runs the handler: 409.
        consumer.wait(
            lambda: 409 in (a.status for a in consumer.arrivals),
            within_s=WORKER_KILLED_GOAL_S + 10,
            what="the delivery made again",
        )
        redelivered_s = min(a.at for a in consumer.arrivals if a.status == 409) - killed_at
        consumer.release.set()
        delivered_s = seconds_until_delivered(
            database_url, endpoint, 1, since=killed_at, within_s=30
        )
        arrivals = sorted(consumer.arrivals, key=lambda a: a.at)
    feed = settled_feed(deployment.service, token, database_url)
    (event,) = feed
    operation = rows(
        database_url,
        "SELECT status, attempts FROM operations_operation WHERE kind = %s",
        "webhook.deliver",
    )

    answers = ", ".join(str(a.status) for a in arrivals)
    figures.measure = (
        f"answers {answers} (the first to the killed worker), redelivered {redelivered_s:.1f} s"
        f" after the kill, delivered after {delivered_s:.1f} s"
    )
    figures.tally(feed, [consumer], delivered(database_url))
    assert len(arrivals) >= 3
    assert {a.webhook_id for a in arrivals} == {event["id"]}
    assert len({a.body for a in arrivals}) == 1
    assert (arrivals[0].status, arrivals[1].status, arrivals[-1].status) == (200, 409, 200)
    assert consumer.handled == Counter({event["id"]: 1})
    assert operation == [("succeeded", len(arrivals))]
    assert (figures.delivered, figures.handled_twice, figures.lost) == (1, 0, 0)
    assert redelivered_s <= WORKER_KILLED_GOAL_S


# The sweep runs as the worker reconnects (every second while the broker is
# away): what was committed meanwhile goes out within seconds.
BROKER_BACK_GOAL_S = 10.0


def test_broker_down_during_the_commands(
    deployment: Deployment, broker: RedisServer, token: str, database_url: str, tmp_path: Path
) -> None:
    figures = WebhookFigures("broker down during the commands")
    deployment.start_web()
    worker = deployment.start_worker()
    client = RetryingClient(deployment.service.base_url, token, Figures("webhooks"))
    with consuming(tmp_path / "inbox.sqlite3") as consumer:
        endpoint = subscribe(client, consumer)
        before = [client.place_order() for _ in range(5)]
        seconds_until_delivered(database_url, endpoint, 5, since=time.monotonic(), within_s=20)

        broker.stop()
        during = [client.place_order() for _ in range(6)]
        accepted = [client.pay(order) for order in during]
        # The worker has noticed, and tried the broker three times.
        deployment.wait_for_worker_line(worker, "(3/", within_s=30)
        broker.start()
        back_at = time.monotonic()
        recovery_s = seconds_until_delivered(
            database_url, endpoint, 17, since=back_at, within_s=BROKER_BACK_GOAL_S + 20
        )
    feed = settled_feed(deployment.service, token, database_url)
    customers = [o["customerId"] for o in [*before, *during]]
    found = audit(database_url, orders=customers, paid=[o["customerId"] for o in during])

    figures.measure = f"last delivered {recovery_s:.1f} s after the broker was back"
    figures.tally(feed, [consumer], delivered(database_url))
    assert all(a["status"] == "processing" for a in accepted)
    assert worker.poll() is None
    assert types_of(feed) == {"order.created": 11, "payment.succeeded": 6}
    assert consumer.handled == Counter({event["id"]: 1 for event in feed})
    assert (figures.delivered, figures.duplicates, figures.lost) == (17, 0, 0)
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)
    assert recovery_s <= BROKER_BACK_GOAL_S


@dataclass(frozen=True)
class Effects:
    """The effects the rows and the provider's ledger record, named as their events name them."""

    # (type, resource), one per effect.
    expected: list[tuple[str, str]]
    # Payments with a successful charge, and with a successful refund, in the ledger.
    charged: set[str]
    refunded: set[str]


def effects_in_database(database_url: str) -> Effects:
    orders = rows(database_url, "SELECT id, status FROM orders_order")
    payments = rows(database_url, "SELECT id, status FROM orders_payment")
    ledger = rows(database_url, "SELECT payment_id, kind FROM provider_ledgerentry WHERE succeeded")
    expected = [("order.created", f"/v1/orders/{o}") for o, _ in orders]
    expected += [("order.cancelled", f"/v1/orders/{o}") for o, s in orders if s == "cancelled"]
    for payment, status in payments:
        resource = f"/v1/payments/{payment}"
        if status in ("succeeded", "refunded"):
            expected.append(("payment.succeeded", resource))
        if status == "refunded":
            expected.append(("payment.refunded", resource))
        if status == "failed":
            expected.append(("payment.failed", resource))
    return Effects(
        expected=expected,
        charged={p for p, kind in ledger if kind == "charge"},
        refunded={p for p, kind in ledger if kind == "refund"},
    )


def test_replays_and_retried_commands_make_one_event_per_effect(
    deployment: Deployment, token: str, database_url: str, tmp_path: Path
) -> None:
    figures = WebhookFigures("replays and retried commands")
    commands = Figures("webhooks, commands")
    deployment.start_web()
    deployment.start_worker()
    direct = RetryingClient(deployment.service.base_url, token, commands)
    with (
        consuming(tmp_path / "inbox.sqlite3") as consumer,
        FaultProxy(deployment.service.address, mode=Mode.DROP_ANSWERS, drop_every=2) as proxy,
    ):
        endpoint = subscribe(direct, consumer)
        # Every other answer lost: each command is sent again under its key.
        dropping = RetryingClient(f"http://127.0.0.1:{proxy.port}", token, commands)
        with ThreadPoolExecutor(4) as pool:
            paid = list(pool.map(dropping.order_and_pay, range(12)))
        # One command sent eight times at once, under one key.
        one_key = run_concurrently(
            8,
            lambda _: direct.command("POST", "/v1/orders", order_body("one-key"), key="one-key"),
        )
        # One order id put under eight keys at once.
        one_id = run_concurrently(
            8,
            lambda i: direct.command(
                "PUT", "/v1/orders/ord_one-id", order_body("one-id"), key=f"one-id-{i}"
            ),
        )
        put_order = one_id[0].json()["order"]
        # Its payment sent six times at once, under one key.
        put_paid = run_concurrently(6, lambda _: pay(direct, put_order))
        declined = dropping.place_order("declined")
        declined_paid = pay(dropping, declined, "pm_card_declined")
        seconds_until_finished(database_url, since=time.monotonic(), within_s=30)
        # Pending orders cancelled under six keys each at once; two paid
        # ones refunded the same way.
        pending = [one_key[0].json()["orderId"], declined["id"]]
        to_cancel = [*pending, paid[0]["id"], paid[1]["id"]]
        cancels = run_concurrently(
            24, lambda i: cancel(direct, to_cancel[i % 4], key=f"cancel-{i}")
        )
        seconds_until_finished(database_url, since=time.monotonic(), within_s=30)
        # Every cancel again, through the proxy and under its key: replays.
        replays = [cancel(dropping, to_cancel[i % 4], key=f"cancel-{i}") for i in range(24)]
        feed = settled_feed(deployment.service, token, database_url)
        seconds_until_delivered(
            database_url, endpoint, len(feed), since=time.monotonic(), within_s=30
        )
        effects = effects_in_database(database_url)
    customers = [o["customerId"] for o in paid]
    found = audit(
        database_url,
        orders=[*customers, "one-key", "one-id", "declined"],
        paid=[*customers, "one-id"],
    )

    in_feed = [(event["type"], event["links"]["resource"]) for event in feed]
    orphans = Counter(in_feed) - Counter(effects.expected)
    missing = Counter(effects.expected) - Counter(in_feed)
    figures.measure = (
        f"commands sent {commands.sent} (retries {commands.retries}, unanswered"
        f" {commands.unanswered}), effects {len(effects.expected)}, events without their"
        f" effect {orphans.total()}, effects without their event {missing.total()}"
    )
    figures.tally(feed, [consumer], delivered(database_url))
    assert proxy.dropped >= 12
    assert commands.unanswered >= 12
    assert {(r.status_code, r.json()["orderId"]) for r in one_key} == {
        (201, one_key[0].json()["orderId"])
    }
    assert sorted(r.status_code for r in one_id) == [200] * 7 + [201]
    assert (put_paid, declined_paid) == ([202] * 6, 202)
    assert {status for i, status in enumerate(cancels) if i % 4 < 2} == {200}
    assert {status for i, status in enumerate(cancels) if i % 4 >= 2} <= {200, 202}
    assert replays == cancels
    assert types_of(feed) == {
        "order.created": 15,
        "payment.succeeded": 13,
        "payment.failed": 1,
        "order.cancelled": 4,
        "payment.refunded": 2,
    }
    assert (orphans.total(), missing.total(), figures.duplicates) == (0, 0, 0)
    succeeded = {r.rsplit("/", 1)[1] for t, r in in_feed if t == "payment.succeeded"}
    refunded = {r.rsplit("/", 1)[1] for t, r in in_feed if t == "payment.refunded"}
    assert (succeeded, refunded) == (effects.charged, effects.refunded)
    assert consumer.handled == Counter({event["id"]: 1 for event in feed})
    assert (found.duplicates, found.lost, found.stuck) == (0, 0, 0)


# The slow receiver's answer time: under WEBHOOK_TIMEOUT (5 s), so that
# each of its deliveries is taken, one at a time.
SLOW_S = 2.0


def test_a_slow_receiver_never_holds_up_another_endpoint(
    deployment: Deployment, token: str, database_url: str, tmp_path: Path
) -> None:
    figures = WebhookFigures(f"a receiver answering in {SLOW_S:g} s beside a fast one")
    deployment.start_web()
    # Two tasks at once, as the deployed worker runs them on two cores.
    deployment.start_worker(pool="prefork", concurrency=2)
    client = RetryingClient(deployment.service.base_url, token, Figures("webhooks"))
    with (
        consuming(tmp_path / "slow.sqlite3", delay=SLOW_S) as slow,
        consuming(tmp_path / "fast.sqlite3") as fast,
    ):
        slow_endpoint = subscribe(client, slow)
        fast_endpoint = subscribe(client, fast)
        placed_at = time.monotonic()
        for _ in range(6):
            client.place_order()
        fast.wait(lambda: len(fast.handled) == 6, within_s=30, what="the fast receiver")
        fast_s = time.monotonic() - placed_at
        slow_meanwhile = slow.arrived
        # Six answers one after another: each attempt, as it lets the
        # endpoint go, sends the next delivery that waits for it.
        slow.wait(lambda: len(slow.handled) == 6, within_s=6 * SLOW_S + 20, what="the slow one")
        slow_s = time.monotonic() - placed_at
        for endpoint in (slow_endpoint, fast_endpoint):
            seconds_until_delivered(database_url, endpoint, 6, since=placed_at, within_s=10)
    feed = settled_feed(deployment.service, token, database_url)

    figures.measure = (
        f"the fast one had all 6 after {fast_s:.1f} s, when the slow one had received"
        f" {slow_meanwhile}; the slow one all 6 after {slow_s:.1f} s, at most"
        f" {slow.most_in_flight} at a time"
    )
    figures.tally(feed, [slow, fast], delivered(database_url))
    assert slow_meanwhile <= 2
    assert slow.most_in_flight == 1
    assert fast.handled == slow.handled == Counter({event["id"]: 1 for event in feed})
    assert (figures.events, figures.delivered, figures.lost) == (6, 12, 0)
