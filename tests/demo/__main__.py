"""``python -m tests.demo`` (``make demo``); tests/demo/__init__.py says what it shows.

Configured by the environment:

- ``DEMO_ORDERS``: the intended actions (default 20), run 4 at a time;
- ``DEMO_DROP``: the share of answers dropped after the service gave them
  (default 0.3); ``DEMO_RESET``: the share of connections reset before
  their request goes on (default 0.1); ``DEMO_SEED``: which ones (random
  unless set);
- ``DATABASE_URL`` and ``CELERY_BROKER_URL``: PostgreSQL and Redis, as in
  production; unset, the embedded default (SQLite files in a temporary
  directory removed at the end, or in ``VAR_DIR`` if set);
- ``BASE_URL``: a service already running on that database (such as
  ``make run``'s, on ``VAR_DIR=var``), instead of one started here. Its
  webhooks reach the demo's receiver on 127.0.0.1 only if it runs with
  ``WEBHOOK_ALLOW_PRIVATE_URLS=true``; otherwise the demo says it skips them.
"""

import os
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from order_service_client import (
    DeliveryInProgress,
    OrderServiceClient,
    RetryEvent,
    RetryPolicy,
    SQLiteInbox,
    WebhookEvent,
    WebhookVerificationFailed,
    WebhookVerifier,
)

from tests.support.faults import FaultProxy, Mode, Shares
from tests.support.live import ROOT, LiveService, base_env, manage, serve

CONCURRENCY = 4
ITEM = {"sku": "ABC", "qty": 1}
# Each call may meet several faults in a row: 40 % of the connections fail
# by default. Thirty attempts make giving up a one-in-10^12 event, and the
# pause between them stays short, so that the demo takes seconds.
POLICY = RetryPolicy(max_attempts=30, deadline=120.0, base_delay=0.05, max_delay=1.0)
# How long the demo waits, after its orders, for every event of the feed to
# be delivered and handled: one worker delivers some 40 events in a second
# or two; the rest is room for a slow machine.
WEBHOOKS_WITHIN_S = 60.0


@dataclass(frozen=True)
class Settings:
    orders: int
    drop: float
    reset: float
    seed: int | None
    base_url: str | None
    env: dict[str, str]
    # The demo's temporary directory: the webhook receiver's inbox is there.
    scratch: Path

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *, scratch: Path) -> "Settings":
        """The settings ``environ`` gives; ``scratch`` is the embedded default's directory."""
        servers = {k: environ[k] for k in ("DATABASE_URL", "CELERY_BROKER_URL") if k in environ}
        var_dir = environ.get("VAR_DIR") or (
            str(ROOT / "var") if "BASE_URL" in environ else str(scratch)
        )
        return cls(
            orders=int(environ.get("DEMO_ORDERS", "20")),
            drop=float(environ.get("DEMO_DROP", "0.3")),
            reset=float(environ.get("DEMO_RESET", "0.1")),
            seed=int(environ["DEMO_SEED"]) if environ.get("DEMO_SEED") else None,
            base_url=environ.get("BASE_URL"),
            env=base_env(
                VAR_DIR=str(Path(var_dir).resolve()),
                DEBUG="0",
                # The demo's story is its own lines, not a log line per request.
                LOG_LEVEL="WARNING",
                GUNICORN_CMD_ARGS="--log-level warning",
                # The demo's webhook receiver listens on 127.0.0.1, an address
                # a service refuses to call unless told (a service at BASE_URL
                # keeps its own settings).
                WEBHOOK_ALLOW_PRIVATE_URLS="true",
                **servers,
            ),
            scratch=scratch,
        )

    @property
    def where(self) -> str:
        database = self.env.get("DATABASE_URL", f"SQLite in {self.env['VAR_DIR']}")
        broker = self.env.get("CELERY_BROKER_URL", "the embedded broker")
        return f"{database}, {broker}"


@contextmanager
def running_service(settings: Settings) -> Iterator[LiveService]:
    """The service at BASE_URL, or one started here (gunicorn and a Celery worker)."""
    if settings.base_url:
        yield LiveService(base_url=settings.base_url.rstrip("/"))
        return
    manage("migrate", "--noinput", "-v0", env=settings.env)
    manage("seed_demo", env=settings.env)
    with serve(settings.env, web_workers=2, celery=True) as service:
        yield service


class Retries:
    """The client's retries, by reason (its ``on_retry`` hook)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_reason: Counter[str] = Counter()

    def __call__(self, event: RetryEvent) -> None:
        with self._lock:
            self.by_reason[event.reason] += 1

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())


def intended_action(client: OrderServiceClient, customer_id: str) -> None:
    """Place an order of one ABC, pay it and wait for the charge: three intended commands."""
    order = client.create_order(customer_id=customer_id, currency="RUB", items=[ITEM]).body["order"]
    payment = client.pay(
        order_id=order["id"],
        amount=order["totalAmount"],
        currency=order["currency"],
        payment_method="pm_card_ok",
    )
    client.wait(payment.body)


@dataclass(frozen=True)
class Outcome:
    """What the database and the provider's ledger hold for the demo's tenant."""

    orders: int
    customers: int
    payments: int
    paid_orders: int
    charges: int
    charged_payments: int

    def duplicates(self) -> int:
        return (
            (self.orders - self.customers)
            + (self.payments - self.paid_orders)
            + (self.charges - self.charged_payments)
        )

    def lost(self, intended: int) -> int:
        return (intended - self.customers) + (intended - self.charged_payments)


class WebhookReceiver:
    """The demo's webhook endpoint, written as client/README.md writes one.

    Each delivery is verified with the endpoint's secret (``400`` if it does
    not verify), then handed to a ``SQLiteInbox`` whose handler counts the
    event: ``409`` while another delivery of the event runs it, ``500`` if
    it failed, ``200`` otherwise. Every ``POST`` counts as received.
    """

    def __init__(self, inbox: Path) -> None:
        self.inbox = SQLiteInbox(inbox)
        # Set once subscribed: the secret is in that answer only.
        self.verifier: WebhookVerifier | None = None
        self.received = 0
        # Runs of the handler, per event id.
        self.handled: Counter[str] = Counter()
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = receiver.answer(body, dict(self.headers.items()))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/webhooks"

    def answer(self, body: bytes, headers: Mapping[str, str]) -> int:
        with self.changed:
            self.received += 1
        if self.verifier is None:
            return 503
        try:
            event = self.verifier.verify(body, headers)
            self.inbox.handle(event.id, partial(self.handle, event))
        except WebhookVerificationFailed:
            return 400
        except DeliveryInProgress:
            return 409
        except Exception:
            return 500
        return 200

    def has_handled(self, ids: set[str]) -> bool:
        return ids <= self.handled.keys()

    def handle(self, event: WebhookEvent) -> None:
        """The application's work for one event: here, counting it."""
        with self.changed:
            self.handled[event.id] += 1
            self.changed.notify_all()


@contextmanager
def receiving_webhooks(inbox: Path) -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver(inbox)
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join()


def subscribe(service: LiveService, token: str, receiver: WebhookReceiver, *, key: str) -> bool:
    """Subscribe ``receiver`` to every event; False if the service refuses its URL.

    :raises httpx.HTTPStatusError: any other refusal.
    """
    response = httpx.post(
        service.url("/v1/webhook-endpoints"),
        json={"url": receiver.url, "eventTypes": ["*"]},
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
        timeout=30,
    )
    if response.status_code == 400 and "url" in response.json().get("details", {}):
        return False
    response.raise_for_status()
    receiver.verifier = WebhookVerifier(response.json()["secret"])
    return True


def read_feed(service: LiveService, token: str) -> list[dict[str, Any]]:
    """Every event of the tenant's feed, oldest first, page after page."""
    events: list[dict[str, Any]] = []
    path: str | None = "/v1/events?pageSize=200"
    while path is not None:
        response = httpx.get(
            service.url(path), headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        response.raise_for_status()
        page = response.json()
        events += page["results"]
        path = page["next"]
    return events


@dataclass(frozen=True)
class Webhooks:
    """What the feed holds, and what the receiver made of its deliveries."""

    events: int
    received: int
    handled: int
    handled_twice: int
    # Events of the feed not handled within WEBHOOKS_WITHIN_S.
    unhandled: int


def webhooks_when_handled(service: LiveService, token: str, receiver: WebhookReceiver) -> Webhooks:
    """Wait (within WEBHOOKS_WITHIN_S) until every event of the feed is handled; the counts."""
    deadline = time.monotonic() + WEBHOOKS_WITHIN_S
    while True:
        ids = {event["id"] for event in read_feed(service, token)}
        left = deadline - time.monotonic()
        with receiver.changed:
            # Woken as each event is handled; the feed is read again at
            # least twice a second, since it too may still be growing.
            receiver.changed.wait_for(partial(receiver.has_handled, ids), max(0, min(left, 0.5)))
            unhandled = len(ids - receiver.handled.keys())
            if not unhandled or left <= 0:
                return Webhooks(
                    events=len(ids),
                    received=receiver.received,
                    handled=len(receiver.handled),
                    handled_twice=sum(n - 1 for n in receiver.handled.values()),
                    unhandled=unhandled,
                )


def count_in_database(env: Mapping[str, str], tenant: str) -> Outcome:
    """Read the outcome with the service's own models, on the service's database."""
    os.environ.update({k: v for k, v in env.items() if k in ("DATABASE_URL", "VAR_DIR")})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from orders.models import Order, Payment
    from provider.models import LedgerEntry

    orders = Order.objects.filter(tenant__slug=tenant)
    payments = Payment.objects.filter(order__in=orders)
    charges = LedgerEntry.objects.filter(
        kind=LedgerEntry.Kind.CHARGE,
        succeeded=True,
        payment_id__in=payments.values("id"),
    )
    return Outcome(
        orders=orders.count(),
        customers=orders.values("customer_id").distinct().count(),
        payments=payments.count(),
        paid_orders=payments.values("order_id").distinct().count(),
        charges=charges.count(),
        charged_payments=charges.values("payment_id").distinct().count(),
    )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="demo-") as scratch:
        return demo(Settings.from_environ(os.environ, scratch=Path(scratch)))


def demo(settings: Settings) -> int:
    run = uuid.uuid4().hex[:8]
    tenant = f"demo-{run}"
    print(f"demo: the service on {settings.where}")
    with (
        running_service(settings) as service,
        receiving_webhooks(settings.scratch / "webhook-inbox.sqlite3") as receiver,
    ):
        token = manage("create_api_client", tenant, "demo", env=settings.env).splitlines()[-1]
        subscribed = subscribe(service, token, receiver, key=f"{tenant}-webhooks")
        if subscribed:
            print(
                f"webhooks: a receiver at {receiver.url} subscribed to every event, each"
                " delivery verified and each event handled once (order_service_client.webhooks)"
            )
        else:
            print(
                "webhooks: skipped, the service refuses to deliver to 127.0.0.1"
                " (set WEBHOOK_ALLOW_PRIVATE_URLS=true where it runs)"
            )
        shares = Shares(drop=settings.drop, reset=settings.reset, seed=settings.seed)
        with FaultProxy(service.address, mode=Mode.DROP_ANSWERS, shares=shares) as proxy:
            print(
                f"demo: {settings.orders} orders to place and pay through a proxy that drops"
                f" {settings.drop:.0%} of the answers and resets {settings.reset:.0%} of the"
                " connections"
            )
            retries = Retries()
            # One request per connection: the proxy's fates fall on connections,
            # so the share of connections it drops is the share of answers.
            transport = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
            with OrderServiceClient(
                f"http://127.0.0.1:{proxy.port}",
                token,
                retry=POLICY,
                transport=transport,
                on_retry=retries,
            ) as client:
                customers = [f"{tenant}-{i}" for i in range(settings.orders)]
                with ThreadPoolExecutor(CONCURRENCY) as pool:
                    list(pool.map(lambda c: intended_action(client, c), customers))
            answered = proxy.accepted - proxy.reset
            print(
                f"proxy: {proxy.accepted} requests, {proxy.dropped} of {answered} answers dropped"
                f" ({proxy.dropped / max(answered, 1):.0%}), {proxy.reset} connections reset"
            )
        reasons = ", ".join(f"{n} after {reason}" for reason, n in retries.by_reason.most_common())
        print(f"client: {retries.total} retries ({reasons or 'none'})")
        outcome = count_in_database(settings.env, tenant)
        webhooks = webhooks_when_handled(service, token, receiver) if subscribed else None
    print(
        f"database: {outcome.orders} orders for {outcome.customers} customers,"
        f" {outcome.payments} payments; provider ledger: {outcome.charges} charges"
    )
    webhooks_kept = webhooks is None or (webhooks.unhandled, webhooks.handled_twice) == (0, 0)
    if webhooks is not None:
        if webhooks.unhandled:
            print(
                f"webhooks: {webhooks.unhandled} events of the feed not handled within"
                f" {WEBHOOKS_WITHIN_S:g} s"
            )
        print(
            f"webhooks: {webhooks.events} events in the feed, {webhooks.received} deliveries"
            f" received, {webhooks.handled} handled, {webhooks.handled_twice} handled twice"
        )
    lost = outcome.lost(settings.orders)
    if lost:
        print(f"demo: {lost} intended actions did not happen")
    print(
        f"demo: {outcome.orders} orders, {outcome.charges} charges,"
        f" {retries.total} retries, {outcome.duplicates()} duplicates"
    )
    return 0 if outcome.duplicates() == 0 and lost == 0 and webhooks_kept else 1


if __name__ == "__main__":
    sys.exit(main())
