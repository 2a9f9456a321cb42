"""HTTP soak with worker restarts (``make soak-http``): what a restart costs, and what stays.

Starts gunicorn with the project's configuration (``SOAK_HTTP_WORKERS``
workers, 2) on a PostgreSQL database of its own and the Redis broker,
recycling each worker after ``SOAK_HTTP_MAX_REQUESTS`` requests (200, with
a jitter of a quarter; 0 turns recycling off), and sends
``SOAK_HTTP_REQUESTS`` (30,000) requests of a mix: order creations,
replays of them, reads, lists, payments and 404s, eight clients at once,
each request on a connection of its own as nginx sends them. It prints, at
the start and at the end:

- each worker's resident memory (RSS);
- the metrics directory: the files a scrape reads, and their bytes;
- the time of one scrape of ``/metrics`` (the median of five);
- the CPU of one worker restart (the median of three): the new worker's,
  from its fork to its first answer (importing Django and the app);

and, at the end, the restarts seen, the master's CPU per restart (reaping,
folding the dead worker's metrics, forking; over the whole soak, since
/proc counts in ticks of 10 ms, so it includes the master's idle
wake-ups too), and whether ``http_requests_total`` grew by every answer
the soak received. ``SOAK_HTTP_ARCHIVE=0`` serves
with the metrics archive off (tests/bench/gunicorn_no_archive.py), as the
service was before it, to compare. No Celery worker runs: payments are
accepted (202) and their messages dropped from the queue at the end.

Not a test: timings belong here, not in assertions (tests/observability
holds the counts and the directory's size to account).
"""

import os
import signal
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.bench import service
from tests.support.live import LiveService, serve
from tests.support.waits import wait_for, wait_until
from tests.support.workers import Gunicorn, metrics_files, pid_file_args, process_cpu_s, rss_mib

# Its own name per run, to run two soaks at once (SOAK_HTTP_MAX_REQUESTS=0 beside another).
DATABASE = os.environ.get("SOAK_HTTP_DATABASE", "order_service_soak_http")
REQUESTS = int(os.environ.get("SOAK_HTTP_REQUESTS", "30000"))
MAX_REQUESTS = int(os.environ.get("SOAK_HTTP_MAX_REQUESTS", "200"))
WORKERS = int(os.environ.get("SOAK_HTTP_WORKERS", "2"))
ARCHIVE = os.environ.get("SOAK_HTTP_ARCHIVE", "1") != "0"
CLIENTS = 8
ORDER = {"customerId": "soak", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"}
# One round of the mix, ten requests: what a client of the API sends most
# (reads, lists), the commands with their retries, and requests for what
# does not exist.
ROUND = ("create", "create", "replay", "read", "read", "read", "list", "list", "pay", "missing")
# kombu's Redis transport keeps a list per priority step of the queue.
_QUEUE_KEYS = ["celery", *(f"celery\x06\x16{p}" for p in (3, 6, 9))]


def main() -> None:
    env, token = service.prepare(DATABASE)
    with tempfile.TemporaryDirectory(prefix="soak-http-") as scratch:
        metrics_dir = Path(scratch) / "metrics"
        metrics_dir.mkdir()
        pid_file = Path(scratch) / "gunicorn.pid"
        # A throttle would answer most of the soak with 429s.
        env.update(PROMETHEUS_MULTIPROC_DIR=str(metrics_dir), API_THROTTLE_RATE="")
        args = [
            *pid_file_args(pid_file),
            f"--max-requests={MAX_REQUESTS}",
            f"--max-requests-jitter={MAX_REQUESTS // 4}",
        ]
        if not ARCHIVE:
            # The last -c wins; it loads config/gunicorn.py and puts back the old hook.
            args += ["-c", "tests/bench/gunicorn_no_archive.py"]
        with serve(env, web_workers=WORKERS, gunicorn_args=args) as live:
            server = Gunicorn.from_pid_file(pid_file)
            soak = Soak(live, token, server, metrics_dir)
            print(
                f"HTTP soak: {REQUESTS} requests, {WORKERS} workers recycled every"
                f" {MAX_REQUESTS or 'never'} requests, metrics archive {'on' if ARCHIVE else 'off'}"
            )
            soak.report("start")
            before = soak.answered
            counted = soak.counted()
            with soak.counting_restarts():
                soak.run(REQUESTS)
            soak.report("end")
            after = soak.answered
            # Each scrape counts the answers given before it, its own not yet.
            print(
                f"  http_requests_total grew by {soak.counted() - counted:.0f}; answers from the"
                f" first scrape to the last {after - before}; requests without an answer"
                f" {soak.failed}"
            )
    redis.Redis.from_url(service.BROKER_URL).delete(*_QUEUE_KEYS)
    service.drop(DATABASE)


@dataclass
class Soak:
    live: LiveService
    token: str
    server: Gunicorn
    metrics_dir: Path
    answered: int = 0
    failed: int = 0
    restarts: int = 0
    _count_lock: threading.Lock = field(default_factory=threading.Lock)
    _orders: list[dict[str, Any]] = field(default_factory=list)

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response | None:
        """One request on a connection of its own; None if it got no answer (counted as failed)."""
        headers = {"Authorization": f"Bearer {self.token}", "Connection": "close"}
        try:
            response = requests.request(
                method,
                self.live.url(path),
                headers={**headers, **kwargs.pop("headers", {})},
                timeout=60,
                **kwargs,
            )
        except requests.ConnectionError:
            with self._count_lock:
                self.failed += 1
            return None
        with self._count_lock:
            self.answered += 1
        return response

    def run(self, total: int) -> None:
        started = time.monotonic()
        rounds = total // len(ROUND)
        with ThreadPoolExecutor(CLIENTS) as pool:
            statuses = [s for batch in pool.map(self.one_round, range(rounds)) for s in batch]
        seconds = time.monotonic() - started
        by_status: dict[int, int] = {}
        for status in statuses:
            by_status[status] = by_status.get(status, 0) + 1
        print(
            f"  sent {len(statuses)} requests in {seconds:.0f} s"
            f" ({len(statuses) / seconds:.0f}/s); by status {dict(sorted(by_status.items()))},"
            f" 0 = no answer"
        )

    def one_round(self, i: int) -> list[int]:
        statuses = []
        key = uuid.uuid4().hex
        order: dict[str, Any] | None = None
        for kind in ROUND:
            response = self._send(kind, key, order)
            statuses.append(response.status_code if response is not None else 0)
            if kind == "create" and response is not None and response.status_code == 201:
                order = response.json()["order"]
                with self._count_lock:
                    self._orders.append(order)
        return statuses

    def _send(self, kind: str, key: str, order: dict[str, Any] | None) -> requests.Response | None:
        if kind == "create":
            return self.request("POST", "/v1/orders", json=ORDER, headers=_key(uuid.uuid4().hex))
        if kind == "replay":
            return self.request("POST", "/v1/orders", json=ORDER, headers=_key(key))
        if kind == "read":
            return self.request("GET", f"/v1/orders/{order['id'] if order else 'ord_none'}")
        if kind == "list":
            return self.request("GET", "/v1/orders?pageSize=20")
        if kind == "pay" and order is not None:
            body = {
                "orderId": order["id"],
                "amount": order["totalAmount"],
                "currency": order["currency"],
                "paymentMethod": "pm_card_ok",
            }
            return self.request("POST", "/v1/payments", json=body, headers=_key(uuid.uuid4().hex))
        return self.request("GET", f"/v1/orders/ord_missing{uuid.uuid4().hex[:8]}")

    def report(self, when: str) -> None:
        # A worker still loading the app is not yet the size it serves at.
        workers = sorted(self.every_worker_answered())
        rss = ", ".join(f"{rss_mib(pid):.1f}" for pid in workers)
        files, size = metrics_files(self.metrics_dir)
        scrape_ms = statistics.median(self.scrape_s() for _ in range(5)) * 1000
        worker_s = statistics.median(self.restart() for _ in range(3))
        print(f"  at the {when}:")
        print(f"    workers' RSS        {rss} MiB")
        print(f"    metrics directory   {files} files, {size / 1024:.0f} KiB")
        print(f"    one scrape          {scrape_ms:.1f} ms")
        print(
            f"    one restart's CPU   {worker_s * 1000:.0f} ms"
            " (the new worker's, to its first answer)"
        )

    def scrape_s(self) -> float:
        started = time.perf_counter()
        response = self.request("GET", "/metrics")
        assert response is not None
        assert response.status_code == 200
        return time.perf_counter() - started

    def restart(self) -> float:
        """SIGTERM one worker, as max_requests ends one; the new worker's CPU seconds."""
        before = self.server.workers()
        self.server.kill(min(before), signal.SIGTERM)
        after = self.server.wait_for_workers(len(before), other_than={min(before)})
        (new,) = after - before
        wait_until(lambda: self._answered_by(new), 60, what=f"an answer from worker {new}")
        return process_cpu_s(new)

    def every_worker_answered(self) -> set[int]:
        def answered() -> dict[int, bool]:
            return {pid: self._answered_by(pid) for pid in self.server.workers()}

        found = wait_for(
            answered, lambda by_pid: all(by_pid.values()), 60, what="an answer from every worker"
        )
        return set(found)

    def _answered_by(self, pid: int) -> bool:
        # A worker's counter file appears with its first counted answer.
        self.request("GET", "/healthz")
        return (self.metrics_dir / f"counter_{pid}.db").exists()

    @contextmanager
    def counting_restarts(self) -> Iterator[None]:
        """Counts the workers that start while the block runs (the master's children, polled)."""
        seen = self.server.workers()
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.02):
                seen.update(self.server.workers())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        first = set(seen)
        master_s = self.server.cpu_s()
        try:
            yield
        finally:
            stop.set()
            watcher.join()
            self.restarts = len(seen - first)
            # /proc counts CPU in ticks of 10 ms, more than one restart costs
            # the master: the soak's total, divided, is finer.
            per_restart_ms = (self.server.cpu_s() - master_s) * 1000 / max(1, self.restarts)
            print(
                f"  workers restarted during the soak: {self.restarts} (seen starting);"
                f" the master's CPU, {per_restart_ms:.1f} ms a restart"
            )

    def counted(self) -> float:
        """The sum of ``http_requests_total`` in one scrape: every answer given before it."""
        response = self.request("GET", "/metrics")
        assert response is not None
        return sum(
            sample.value
            for family in text_string_to_metric_families(response.text)
            if family.name == "http_requests"
            for sample in family.samples
            if sample.name == "http_requests_total"
        )


def _key(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key, "Content-Type": "application/json"}


if __name__ == "__main__":
    main()
