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
  ``make run``'s, on ``VAR_DIR=var``), instead of one started here.
"""

import os
import sys
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from order_service_client import OrderServiceClient, RetryEvent, RetryPolicy

from tests.support.faults import FaultProxy, Mode, Shares
from tests.support.live import ROOT, LiveService, base_env, manage, serve

CONCURRENCY = 4
ITEM = {"sku": "ABC", "qty": 1}
# Each call may meet several faults in a row: 40 % of the connections fail
# by default. Thirty attempts make giving up a one-in-10^12 event, and the
# pause between them stays short, so that the demo takes seconds.
POLICY = RetryPolicy(max_attempts=30, deadline=120.0, base_delay=0.05, max_delay=1.0)


@dataclass(frozen=True)
class Settings:
    orders: int
    drop: float
    reset: float
    seed: int | None
    base_url: str | None
    env: dict[str, str]

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
                **servers,
            ),
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
    with running_service(settings) as service:
        token = manage("create_api_client", tenant, "demo", env=settings.env).splitlines()[-1]
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
    print(
        f"database: {outcome.orders} orders for {outcome.customers} customers,"
        f" {outcome.payments} payments; provider ledger: {outcome.charges} charges"
    )
    lost = outcome.lost(settings.orders)
    if lost:
        print(f"demo: {lost} intended actions did not happen")
    print(
        f"demo: {outcome.orders} orders, {outcome.charges} charges,"
        f" {retries.total} retries, {outcome.duplicates()} duplicates"
    )
    return 0 if outcome.duplicates() == 0 and lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
