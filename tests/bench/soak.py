"""Payments soak (``make soak``): a backlog never multiplies the work.

Starts the service as deployed (gunicorn and one Celery worker) on a
PostgreSQL database of its own and the Redis broker, the simulated provider
answering in ``SOAK_PROVIDER_LATENCY`` seconds (0.05, the service's
default), and then:

1. measures the worker's rate alone: a burst of payments small enough to
   drain well within ``OPERATION_STALE_AFTER``, from its first completion
   to its last;
2. sends payments at ``SOAK_LOAD`` times that rate (2) for ``SOAK_SECONDS``
   (60), then nothing, so a backlog grows for the whole minute;
3. waits for the last payment to end (at most ``SOAK_DRAIN_LIMIT`` seconds,
   900), and prints the messages published per payment (Redis's own count
   of the pushes onto its lists, whatever the service's code counts), the
   queue's peak length, and how long the last payment took against what the
   worker's rate alone would take.

Not a test: timings belong here, not in assertions. Redis must serve this
run alone, since its command counts are the whole server's.
"""

import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import redis
import requests

from tests.bench import service

DATABASE = "order_service_soak"
ORDER = {"customerId": "soak", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"}
LATENCY = float(os.environ.get("SOAK_PROVIDER_LATENCY", "0.05"))
LOAD = float(os.environ.get("SOAK_LOAD", "2"))
SECONDS = float(os.environ.get("SOAK_SECONDS", "60"))
DRAIN_LIMIT = float(os.environ.get("SOAK_DRAIN_LIMIT", "900"))
BURST = int(os.environ.get("SOAK_BURST", "40"))
# kombu's Redis transport keeps a list per priority step of the queue.
_QUEUE_KEYS = ["celery", *(f"celery\x06\x16{p}" for p in (3, 6, 9))]


def main() -> None:
    env, token = service.prepare(DATABASE)
    env["PAYMENT_PROVIDER_LATENCY"] = str(LATENCY)
    broker = redis.Redis.from_url(service.BROKER_URL)
    broker.delete(*_QUEUE_KEYS)
    with service.serving(env, celery=True) as live:
        soak = Soak(live.base_url, token, broker)
        rate = soak.worker_rate()
        print(
            f"payments soak: one worker, the provider answering in {LATENCY:g} s;"
            f" the worker alone ends {rate:.1f} payments/s"
        )
        soak.run(rate)


@dataclass
class Soak:
    base_url: str
    token: str
    broker: redis.Redis

    def __post_init__(self) -> None:
        self.local = threading.local()
        self.db = psycopg.connect(service.database_url(DATABASE), autocommit=True)

    @property
    def session(self) -> requests.Session:
        if not hasattr(self.local, "session"):
            self.local.session = requests.Session()
            self.local.session.headers["Authorization"] = f"Bearer {self.token}"
        session: requests.Session = self.local.session
        return session

    def post(self, path: str, body: Any) -> dict[str, Any]:
        response = self.session.post(
            self.base_url + path,
            json=body,
            headers={"Idempotency-Key": uuid.uuid4().hex},
            timeout=60,
        )
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    def orders(self, n: int) -> list[dict[str, Any]]:
        with ThreadPoolExecutor(8) as pool:
            return [
                a["order"] for a in pool.map(lambda _: self.post("/v1/orders", ORDER), range(n))
            ]

    def pay(self, order: dict[str, Any]) -> dict[str, Any]:
        body = {
            "orderId": order["id"],
            "amount": order["totalAmount"],
            "currency": order["currency"],
            "paymentMethod": "pm_card_ok",
        }
        return self.post("/v1/payments", body)

    def processing(self) -> int:
        count: int = self._scalar(
            "SELECT count(*) FROM operations_operation WHERE status = 'processing'"
        )
        return count

    def _scalar(self, query: str, *params: object) -> Any:
        row = self.db.execute(query, params).fetchone()
        return None if row is None else row[0]

    def wait_until_drained(self, limit: float) -> float | None:
        """Seconds until no payment is processing (polled every 0.1 s); None past ``limit``."""
        started = time.monotonic()
        while self.processing():
            if time.monotonic() - started > limit:
                return None
            time.sleep(0.1)
        return time.monotonic() - started

    def worker_rate(self) -> float:
        """Payments the worker ends per second when that is all it does."""
        orders = self.orders(BURST)
        with ThreadPoolExecutor(8) as pool:
            accepted = list(pool.map(self.pay, orders))
        assert self.wait_until_drained(120) is not None, "the burst did not drain"
        first, last = self.db.execute(
            "SELECT min(updated_at), max(updated_at) FROM operations_operation WHERE id = ANY(%s)",
            [[a["operationId"] for a in accepted]],
        ).fetchone() or (None, None)
        assert first is not None
        assert last is not None
        elapsed: float = (last - first).total_seconds()
        return (len(accepted) - 1) / elapsed

    def run(self, worker_rate: float) -> None:
        rate = LOAD * worker_rate
        total = round(rate * SECONDS)
        orders = self.orders(total)
        self.broker.config_resetstat()
        pushes_before = self._pushes()
        with self.sampled_queue() as peak:
            started = time.monotonic()
            last = self.load(orders, rate)
            load_s = time.monotonic() - started
            drained = self.wait_until_drained(DRAIN_LIMIT)
            total_s = time.monotonic() - started
        # Copies of finished work still queued: each a task that will do nothing.
        left = self._queued()
        last_ended = self._scalar(
            "SELECT extract(epoch FROM updated_at - created_at) FROM operations_operation"
            " WHERE id = %s AND status <> 'processing'",
            last["operationId"],
        )
        messages = self._pushes() - pushes_before
        ideal = total / worker_rate
        print(
            f"  load: {rate:.1f} payments/s ({LOAD:g}x the worker's rate) for {load_s:.0f} s,"
            f" {total} payments, then none"
        )
        print(
            f"  messages published       {messages} ({messages / total:.2f} per payment;"
            " Redis's count of pushes)"
        )
        counted = self._copies()
        if counted is not None:
            print(f"  as the operations count  {counted} ({counted / total:.2f} per payment)")
        print(f"  queue's peak length      {peak.value} messages")
        print(f"  left in the queue        {left} messages when the last payment ended")
        if drained is None:
            print(
                f"  after {total_s:.0f} s, {self.processing()} payments were still processing;"
                f" the worker's rate alone would have ended them all in {ideal:.0f} s"
            )
        else:
            print(
                f"  the last payment ended   {total_s:.1f} s after the load began; the worker's"
                f" rate alone: {ideal:.1f} s (x{total_s / ideal:.2f})"
            )
        if last_ended is not None:
            print(f"  the payment sent last    ended {float(last_ended):.1f} s after it was sent")

    def load(self, orders: list[dict[str, Any]], rate: float) -> dict[str, Any]:
        """Pay ``orders`` at ``rate`` a second, each on time whatever the others take."""
        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            futures = []
            for i, order in enumerate(orders):
                time.sleep(max(0.0, started + i / rate - time.monotonic()))
                futures.append(pool.submit(self.pay, order))
            answers = [f.result() for f in futures]
        return answers[-1]

    def _queued(self) -> int:
        return sum(self.broker.llen(key) for key in _QUEUE_KEYS)

    def _pushes(self) -> int:
        stats = self.broker.info("commandstats")
        return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("lpush", "rpush"))

    def _copies(self) -> int | None:
        try:
            total = self._scalar("SELECT sum(publications) FROM operations_operation")
        except psycopg.errors.UndefinedColumn:
            return None  # a version of the service that does not count them
        return int(total) - BURST

    @contextmanager
    def sampled_queue(self) -> Iterator["_Peak"]:
        """The queue's length, sampled every 0.2 s while the block runs."""
        peak = _Peak()
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.2):
                peak.add(self._queued())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            yield peak
        finally:
            stop.set()
            sampler.join()


@dataclass
class _Peak:
    value: int = 0

    def add(self, length: int) -> None:
        self.value = max(self.value, length)


if __name__ == "__main__":
    main()
