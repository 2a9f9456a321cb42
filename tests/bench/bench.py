"""Benchmark: what idempotency costs, as ratios (``make bench``, ``python -m tests.bench``).

Starts the service as deployed (gunicorn and a Celery worker) on a
PostgreSQL database of its own and the Redis broker, then measures:

- a replay against a first execution of ``POST /v1/orders`` (the guard's
  fast path should be much cheaper than doing the work);
- a first execution against a plain read, ``GET /v1/orders/{id}``;
- replays against first executions under 32 concurrent clients;
- the time from ``202`` to ``succeeded`` of a ``pm_card_ok`` payment;
- what a hostile body of 1 MiB costs: parsing, fingerprinting and field
  digests in this process for each shape of tests/support/hostile_bodies.py,
  and the whole answer through the service, against a small order's.

Not a test: timings belong here, not in assertions.
"""

import gc
import os
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import requests

from tests.support.live import base_env, manage, serve

DATABASE = "order_service_bench"
SERVER_URL = os.environ.get("BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432")
BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
ORDER = {"customerId": "bench", "items": [{"sku": "ABC", "qty": 2}], "currency": "RUB"}


def main() -> None:
    _fresh_database()
    env = base_env(
        DATABASE_URL=f"{SERVER_URL}/{DATABASE}",
        CELERY_BROKER_URL=BROKER_URL,
        SECRET_KEY="bench-" + uuid.uuid4().hex,
        LOG_LEVEL="WARNING",
    )
    manage("migrate", "--noinput", env=env)
    manage("seed_demo", env=env)
    token = manage("create_api_client", "bench", "bench", env=env).strip().splitlines()[-1]
    with serve(env, web_workers=2, celery=True) as service:
        bench = Bench(service.base_url, token)
        bench.run()
        bench.hostile_bodies()


def _fresh_database() -> None:
    with psycopg.connect(f"{SERVER_URL}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")


class Bench:
    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def post(self, path: str, body: Any, key: str) -> requests.Response:
        return self.session.post(
            self.base_url + path, json=body, headers={"Idempotency-Key": key}, timeout=30
        )

    def run(self) -> None:
        n = 300
        for _ in range(50):  # warm up connections and code paths
            self.post("/v1/orders", ORDER, uuid.uuid4().hex)
        order_id = self.post("/v1/orders", ORDER, "replayed").json()["orderId"]

        create = self.timed(n, lambda: self.post("/v1/orders", ORDER, uuid.uuid4().hex))
        replay = self.timed(n, lambda: self.post("/v1/orders", ORDER, "replayed"))
        read = self.timed(
            n, lambda: self.session.get(f"{self.base_url}/v1/orders/{order_id}", timeout=30)
        )
        create_rate = self.throughput(32, 600, lambda i: self.post("/v1/orders", ORDER, f"c{i}"))
        replay_rate = self.throughput(32, 600, lambda i: self.post("/v1/orders", ORDER, "replayed"))
        to_succeeded = self.payment_latencies(20)

        print(f"median latency, sequential ({n} requests each):")
        print(f"  first execution  POST /v1/orders   {create:7.2f} ms")
        print(f"  replay           POST /v1/orders   {replay:7.2f} ms")
        print(f"  read             GET  /v1/orders/… {read:7.2f} ms")
        print(f"  replay / first execution           {replay / create:7.2f}")
        print(f"  first execution / read             {create / read:7.2f}")
        print("throughput, 32 concurrent clients:")
        print(f"  first executions {create_rate:7.0f} req/s")
        print(f"  replays          {replay_rate:7.0f} req/s")
        print(f"  replays / first executions         {replay_rate / create_rate:7.2f}")
        print("payment (pm_card_ok), 202 to succeeded, 20 payments:")
        print(f"  median {statistics.median(to_succeeded):7.1f} ms")
        print(f"  max    {max(to_succeeded):7.1f} ms")

    def hostile_bodies(self) -> None:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
        import django

        django.setup()
        from api.parsers import loads_strict
        from idempotency.fingerprint import fingerprint_request
        from tests.support.hostile_bodies import SHAPES

        # As in a web worker (config.wsgi): what was loaded is left out of
        # the collector's full passes.
        gc.freeze()
        n, size = 5, 1_000_000
        bodies = {shape: build(size).encode() for shape, build in SHAPES.items()}
        print(f"hostile bodies of {size // 1000} kB, median of {n}:")
        print("  in this process (ms): parse, fingerprint (all a replay needs),")
        print("  fingerprint with field digests (what a claim or a conflict needs)")
        worst = 0.0
        for shape, raw in bodies.items():
            body = loads_strict(raw)
            parse = self.median_ms(n, lambda: loads_strict(raw))  # noqa: B023
            replay = self.median_ms(
                n,
                lambda: fingerprint_request(method="POST", path="/v1/orders", body=body),  # noqa: B023
            )
            claim = self.median_ms(
                n,
                lambda: fingerprint_request(method="POST", path="/", body=body).field_digests,  # noqa: B023
            )
            worst = max(worst, claim)
            print(f"  {shape:40s} {parse:6.1f} {replay:6.1f} {claim:6.1f}")
        print(f"  the worst fingerprint with its field digests: {worst:.1f} ms")
        small = self.timed(n, lambda: self.post("/v1/orders", ORDER, uuid.uuid4().hex))
        print(f"  through the service: each answered 400, against a small order ({small:.1f} ms)")
        for shape, raw in bodies.items():
            answer = self.median_ms(n, lambda: self.post_raw("/v1/orders", raw))  # noqa: B023
            print(f"  {shape:40s} {answer:7.1f} ms  x{answer / small:5.1f}")

    def post_raw(self, path: str, raw: bytes) -> requests.Response:
        """A first execution of ``raw``: a new key each time."""
        response = self.session.post(
            self.base_url + path,
            data=raw,
            headers={"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"},
            timeout=30,
        )
        # Each shape is a final answer (400), never a refusal of the server's.
        assert response.status_code == 400, response.text
        return response

    @staticmethod
    def median_ms(n: int, call: Any) -> float:
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            call()
            samples.append((time.perf_counter() - started) * 1000)
        return statistics.median(samples)

    @staticmethod
    def timed(n: int, call: Any) -> float:
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            response = call()
            samples.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
        return statistics.median(samples)

    def throughput(self, clients: int, total: int, call: Any) -> float:
        run = uuid.uuid4().hex
        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            for response in pool.map(lambda i: call(f"{run}-{i}"), range(total)):
                response.raise_for_status()
        return total / (time.perf_counter() - started)

    def payment_latencies(self, n: int) -> list[float]:
        latencies = []
        for _ in range(n):
            order = self.post("/v1/orders", ORDER, uuid.uuid4().hex).json()["order"]
            body = {
                "orderId": order["id"],
                "amount": order["totalAmount"],
                "currency": "RUB",
                "paymentMethod": "pm_card_ok",
            }
            accepted = self.post("/v1/payments", body, uuid.uuid4().hex)
            received = time.perf_counter()
            location = self.base_url + accepted.headers["Location"]
            # Polled tightly to time the worker, not as a client should.
            while self.session.get(location, timeout=30).json()["status"] == "processing":
                time.sleep(0.002)
            latencies.append((time.perf_counter() - received) * 1000)
        return latencies
