"""Benchmark: what idempotency costs, as ratios (``make bench``, ``python -m tests.bench``).

Starts the service as deployed (gunicorn and a Celery worker) on a
PostgreSQL database of its own and the Redis broker, with one endpoint
more (tests/bench/urls.py): ``POST /bench/bare/orders``, the same
create-order view without the idempotency protocol. Then it measures, with
wrk driving 16 connections, in rounds that interleave the four loads so
that a drift of the machine spreads over all of them:

- first executions of ``POST /v1/orders`` (a fresh key each) against the
  same requests bare: what the protocol costs where it matters, since
  almost every command is a first execution;
- replays of one ``POST /v1/orders`` against first executions, and against
  reads of the same order, ``GET /v1/orders/{id}``;
- a retry storm: 8 clients placing orders while 8 others replay
  completed keys, against the same 8 clients placing orders alone, in
  alternating rounds: the share of their throughput that first executions
  keep while the retries arrive (closed-loop clients: about
  1 / (1 + a replay's cost / a first execution's));
- first executions of ``POST /v1/payments``, each paying an order of its
  own, and PostgreSQL's ceiling for each command: pgbench running the
  command's minimal transaction in the same rounds (tests/bench/ceiling.py),
  printed as ``create / ceiling`` and ``payment / ceiling``;
- the time from ``202`` to ``succeeded`` of a ``pm_card_ok`` payment, timed
  before the rounds with a Celery worker (the rounds run without one);
- the protocol's CPU against the bare view's, and a create's against the
  plain view's, in one process, where the machine's drift cancels out
  (tests/bench/in_process.py);
- what a hostile body of 1 MiB costs: parsing, fingerprinting and field
  digests in this process for each shape of tests/support/hostile_bodies.py,
  and the whole answer through the service, against a small order's.
- what a page of ``GET /v1/orders?pageSize=200`` costs in one process,
  over orders of 100 lines against orders of one: the CPU, their ratio,
  and the memory the page takes and leaves (tests/bench/in_process.py).

Not a test: timings belong here, not in assertions.
"""

import gc
import json
import os
import statistics
import time
import uuid
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import psycopg
import requests

from tests.bench import ceiling, in_process, service, wrk

DATABASE = "order_service_bench"
ORDER = {"customerId": "bench", "items": [{"sku": "ABC", "qty": 2}], "currency": "RUB"}
# Rounds of the four loads, and each load's seconds in a round: many short
# rounds rather than a few long ones, so that a slow stretch of the machine
# falls on few of them, and the medians leave those out. On a shared 2-core
# machine the ratio of two loads run back to back varies by ±0.1 from round
# to round (60 alternating runs of 2 s: a standard deviation of 0.096), so
# the median of 20 rounds is good to about ±0.03, that of 10 to ±0.04.
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "20"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "2"))
# Rounds of the retry storm, each a run alone and a run beside the replays.
STORM_ROUNDS = int(os.environ.get("BENCH_STORM_ROUNDS", "10"))
# The loads whose ratio matters most run side by side in each round; a
# command's ceiling (tests/bench/ceiling.py) beside the command.
_GROUPS = (
    ("idempotent", "bare", "plain view", "create ceiling"),
    ("replay", "read"),
    ("payment", "payment ceiling"),
)
# The ceilings, run by pgbench rather than wrk: a rate, and no cost read.
_CEILINGS = ("create ceiling", "payment ceiling")
PAYMENT = {"orderId": "@N@", "amount": 3980, "currency": "RUB", "paymentMethod": "pm_card_ok"}


def main() -> None:
    env, token = service.prepare(DATABASE)
    # Timed first, with a worker: after the rounds, their thousands of
    # payments would be waiting to be charged ahead of these.
    with service.serving(env, celery=True, app="tests.bench.wsgi:application") as live:
        payment = Bench(live.base_url, token).payment_latencies(20)
    # No Celery worker while the rounds run: it would charge their payments,
    # on the same two cores as the loads it would then slow. Their messages
    # are dropped after.
    with service.serving(env, app="tests.bench.wsgi:application") as live:
        Bench(live.base_url, token).run()
    service.purge_broker(env)
    print("payment (pm_card_ok), 202 to succeeded, 20 payments, before the rounds:")
    print(f"  median {statistics.median(payment):7.1f} ms")
    print(f"  max    {max(payment):7.1f} ms")
    protocol_cpu(env, token)
    fixed_costs(env, token)
    list_cpu(env)
    with service.serving(env, app="tests.bench.wsgi:application") as live:
        Bench(live.base_url, token).hostile_bodies()


def protocol_cpu(env: dict[str, str], token: str) -> None:
    cpu = in_process.measure(env, token, ORDER)
    print("the protocol's CPU in one process, requests alternating (tests/bench/in_process.py):")
    print(
        f"  first execution  {cpu.idempotent_python_ms:5.2f} ms Python"
        f"  {cpu.idempotent_postgres_ms:5.2f} ms PostgreSQL"
    )
    print(
        f"  bare             {cpu.bare_python_ms:5.2f} ms Python"
        f"  {cpu.bare_postgres_ms:5.2f} ms PostgreSQL"
    )
    print(
        f"  plain view       {cpu.plain_python_ms:5.2f} ms Python"
        f"  {cpu.plain_postgres_ms:5.2f} ms PostgreSQL"
    )
    for label, ratios in [
        ("CPU, bare / idempotent", cpu.ratios),
        ("Python alone, bare / idempotent", cpu.python_ratios),
        ("CPU, plain view / idempotent", cpu.plain_ratios),
    ]:
        print(
            f"  {label:40s} {statistics.median(ratios):5.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        )


def fixed_costs(env: dict[str, str], token: str) -> None:
    costs = in_process.measure_fixed_costs(env, token, ORDER)
    print("what every request pays, in one process, on replays (tests/bench/in_process.py):")
    for name, label in in_process.FIXED_COSTS.items():
        print(
            f"  {label:84s} {statistics.median(costs[name]):4.0f} µs"
            f" ({min(costs[name]):.0f}-{max(costs[name]):.0f})"
        )


def list_cpu(env: dict[str, str]) -> None:
    cost = in_process.measure_lists(env)
    fewest, most = min(cost.python_ms), max(cost.python_ms)
    print(f"a page, GET {in_process.LIST_PAGE}, in one process (tests/bench/in_process.py):")
    for lines in (fewest, most):
        python, postgres = cost.python_ms[lines], cost.postgres_ms[lines]
        kilobytes, peak = cost.page_bytes[lines] / 1000, cost.peak_mb[lines]
        print(
            f"  200 orders of {lines:3d} line{'s' if lines > 1 else ' '}"
            f"  {python:6.2f} ms Python  {postgres:5.2f} ms PostgreSQL"
            f"  {kilobytes:5.0f} kB, {peak:4.1f} MB allocated at peak"
        )
    label = f"CPU, {most}-line / {fewest}-line pages"
    print(
        f"  {label:40s} {statistics.median(cost.ratios):5.2f}"
        f" ({min(cost.ratios):.2f}-{max(cost.ratios):.2f})"
    )
    print(
        f"  this process's resident memory: {cost.rss_before_mb:.0f} MB before {cost.pages}"
        f" pages, {cost.rss_after_mb:.0f} MB after; {in_process.THREADS} threads at once"
        f" on {most}-line pages, {cost.rss_threads_peak_mb:.0f} MB at most,"
        f" {cost.rss_threads_after_mb:.0f} MB after"
    )


class Bench:
    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.token = token
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def post(self, path: str, body: Any, key: str) -> requests.Response:
        return self.session.post(
            self.base_url + path, json=body, headers={"Idempotency-Key": key}, timeout=30
        )

    def run(self) -> None:
        order_id = self.post("/v1/orders", ORDER, "replayed").json()["orderId"]
        headers = {"Authorization": f"Bearer {self.token}"}
        command = {**headers, "Content-Type": "application/json"}
        body = json.dumps(ORDER)
        loads = {
            "idempotent": wrk.Load("POST", "/v1/orders", command, body, fresh_keys=True),
            "bare": wrk.Load("POST", "/bench/bare/orders", command, body),
            "plain view": wrk.Load("POST", "/bench/plain/orders", command, body),
            "replay": wrk.Load("POST", "/v1/orders", command, body, key="replayed"),
            "read": wrk.Load("GET", f"/v1/orders/{order_id}", headers),
        }
        for load in loads.values():  # warm up connections, caches and code paths
            wrk.run(self.base_url, load, seconds=2)
        url = service.database_url(DATABASE)
        # What earlier work left dirty in PostgreSQL's buffers is written now,
        # not by a checkpoint in the middle of the rounds.
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
            meter = _Meter(conn)
            caller = ceiling.Caller.of(conn, self.token)
            names = [name for group in _GROUPS for name in group]
            results: dict[str, list[wrk.Result]] = {n: [] for n in names if n not in _CEILINGS}
            rates: dict[str, list[float]] = {name: [] for name in names}
            costs = {name: Cost() for name in results}
            for round_ in range(ROUNDS):
                # Each ratio's loads run back to back, in either order by
                # turns: the machine's speed drifts by tens of percent over a
                # few seconds here, and a ratio of two runs seconds apart
                # would measure the drift.
                for group in _GROUPS if round_ % 2 == 0 else _GROUPS[::-1]:
                    for name in group if round_ % 2 == 0 else group[::-1]:
                        if name == "create ceiling":
                            rate = ceiling.create_orders(url, caller, seconds=SECONDS)
                        elif name == "payment ceiling":
                            # As many as it made in a run's seconds before.
                            seen = statistics.median(rates["payment ceiling"] or [800.0])
                            rate = ceiling.start_payments(
                                url,
                                conn,
                                caller,
                                round_=round_,
                                each=max(50, int(seen * SECONDS / ceiling.CLIENTS)),
                            )
                        else:
                            load = loads.get(name) or self.payments(conn, caller, round_)
                            result, cost = meter.run(self.base_url, load)
                            results[name].append(result)
                            costs[name] += cost
                            rate = result.rate
                        rates[name].append(rate)
            # The rounds made some 10^5 orders to pay: the planner is told
            # before the benches that read orders, or it plans for a few.
            conn.execute("ANALYZE")
            key_row_bytes = _scalar(
                conn,
                "SELECT (pg_total_relation_size('idempotency_idempotencykey')"
                " + pg_total_relation_size('idempotency_storedanswer'))"
                " / greatest(count(*), 1) FROM idempotency_idempotencykey",
            )
        print(
            f"throughput, wrk with 16 clients (a connection per request), {ROUNDS} interleaved"
            f" rounds of {SECONDS:g} s"
            " (median, range; p50 and p99 latency of the median round):"
        )
        labels = {
            "idempotent": "first execution  POST /v1/orders",
            "bare": "bare             POST /bench/bare/orders",
            "replay": "replay           POST /v1/orders",
            "read": "read             GET  /v1/orders/{id}",
            "payment": "first execution  POST /v1/payments",
        }
        for name, label in labels.items():
            median = _median_result(results[name])
            print(
                f"  {label:46s} {statistics.median(rates[name]):6.0f} req/s"
                f" ({min(rates[name]):.0f}-{max(rates[name]):.0f})"
                f"  p50 {median.p50_ms:5.1f} ms  p99 {median.p99_ms:5.1f} ms"
            )
        print(
            f"PostgreSQL's ceiling, pgbench with {ceiling.CLIENTS} clients of each command's"
            " minimal transaction (tests/bench/ceiling/):"
        )
        for name, label in [
            ("create ceiling", "create_order.sql"),
            ("payment ceiling", "start_payment.sql"),
        ]:
            print(
                f"  {label:46s} {statistics.median(rates[name]):6.0f} tx/s"
                f" ({min(rates[name]):.0f}-{max(rates[name]):.0f})"
            )
        plain = costs["plain view"]
        print(
            f"  {'create_order.sql from a plain Django view':46s}"
            f" {statistics.median(rates['plain view']):6.0f} req/s"
            f" ({min(rates['plain view']):.0f}-{max(rates['plain view']):.0f})"
            f"  {plain.python_ms:.2f} ms gunicorn {plain.postgres_ms:.2f} ms PostgreSQL"
            "  (tests/bench/plain_view.py)"
        )
        print("ratios (median of the rounds' ratios, range):")
        for label, over, under in [
            ("create / ceiling", "idempotent", "create ceiling"),
            ("plain view / ceiling", "plain view", "create ceiling"),
            ("create / plain view", "idempotent", "plain view"),
            ("payment / ceiling", "payment", "payment ceiling"),
            ("idempotent / bare first executions", "idempotent", "bare"),
            ("replays / first executions", "replay", "idempotent"),
            ("reads / first executions", "read", "idempotent"),
            ("replays / reads", "replay", "read"),
        ]:
            ratios = [a / b for a, b in zip(rates[over], rates[under], strict=True)]
            print(
                f"  {label:40s} {statistics.median(ratios):5.2f}"
                f" ({min(ratios):.2f}-{max(ratios):.2f})"
            )
        print(
            f"  {'CPU of a first execution, bare / idempotent':40s}"
            f" {costs['bare'].cpu_ms / costs['idempotent'].cpu_ms:5.2f}"
            "  (gunicorn and PostgreSQL, below)"
        )
        print("where the time goes, per request (all the rounds, read from /proc):")
        print(f"  {'':46s} {'gunicorn':>9s} {'PostgreSQL':>11s} {'wrk':>6s} {'WAL':>8s}")
        for name, label in labels.items():
            cost = costs[name]
            print(
                f"  {label:46s} {cost.python_ms:6.2f} ms {cost.postgres_ms:8.2f} ms"
                f" {cost.wrk_ms:6.2f} {cost.wal_bytes:6.0f} B"
            )
        print(f"  a stored key takes {key_row_bytes} bytes with its answer, indexes included")
        self.retry_storm(loads["idempotent"], loads["replay"])

    def payments(
        self, conn: psycopg.Connection[Any], caller: ceiling.Caller, round_: int
    ) -> wrk.Load:
        """A run of first executions of POST /v1/payments, each paying an order of its own."""
        prefix = f"ord_w{round_}-"
        # wrk's rate may reach a thousand a second; what is left unpaid is harmless.
        ceiling.unpaid_orders(conn, caller, prefix=prefix, count=_enough([], SECONDS))
        conn.execute("CHECKPOINT")
        body = json.dumps({**PAYMENT, "orderId": prefix + "@N@"})
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        return wrk.Load("POST", "/v1/payments", headers, body, fresh_keys=True, numbered=True)

    def retry_storm(self, first: wrk.Load, retry: wrk.Load) -> None:
        """First executions from 8 clients, alone and beside 8 clients replaying, by turns."""
        alone: list[float] = []
        beside: list[float] = []
        replays: list[float] = []
        for round_ in range(STORM_ROUNDS):
            for storm in (False, True) if round_ % 2 == 0 else (True, False):
                retries = (
                    wrk.Background(self.base_url, retry, connections=8, seconds=SECONDS + 5)
                    if storm
                    else None
                )
                result = wrk.run(self.base_url, first, connections=8, seconds=SECONDS)
                if retries is None:
                    alone.append(result.rate)
                else:
                    beside.append(result.rate)
                    replays.append(retries.stop().rate)
        shares = [b / a for a, b in zip(alone, beside, strict=True)]
        print(
            f"retry storm, {STORM_ROUNDS} rounds of {SECONDS:g} s: 8 clients placing orders,"
            " alone and beside 8 clients replaying completed keys:"
        )
        print(
            f"  first executions alone {statistics.median(alone):6.0f} req/s,"
            f" beside the replays {statistics.median(beside):6.0f} req/s"
            f" (and {statistics.median(replays):.0f} replays/s)"
        )
        print(
            f"  {'share the first executions keep':40s} {statistics.median(shares):5.2f}"
            f" ({min(shares):.2f}-{max(shares):.2f})"
        )

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


def _enough(rates: list[float], seconds: float) -> int:
    """Orders enough for a run of ``seconds`` at twice the fastest rate seen, or 2,000 a second."""
    return int(2 * max([*rates, 1000.0]) * seconds) + 100


def _median_result(results: list[wrk.Result]) -> wrk.Result:
    return sorted(results, key=lambda r: r.rate)[len(results) // 2]


@dataclass(frozen=True)
class Cost:
    """What some requests of one load cost: CPU per kind of process, and WAL."""

    requests: int = 0
    python_s: float = 0.0
    postgres_s: float = 0.0
    wrk_s: float = 0.0
    wal: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def _per_request(self, total: float) -> float:
        return total / max(self.requests, 1)

    @property
    def python_ms(self) -> float:
        return self._per_request(self.python_s * 1000)

    @property
    def postgres_ms(self) -> float:
        return self._per_request(self.postgres_s * 1000)

    @property
    def cpu_ms(self) -> float:
        return self.python_ms + self.postgres_ms

    @property
    def wrk_ms(self) -> float:
        return self._per_request(self.wrk_s * 1000)

    @property
    def wal_bytes(self) -> float:
        return self._per_request(self.wal)


class _Meter:
    """wrk runs, each with the CPU and WAL it cost, read from /proc and PostgreSQL around it.

    The CPU is that of the gunicorn processes that serve the bench's
    application, of the PostgreSQL backends connected to the bench's
    database, and of wrk itself (a child of this process); that of
    processes that ended meanwhile is counted too (PostgreSQL ends the
    connections of threads that are gone). Read around every run of the
    rounds, so that each load's figures are its whole time, taking turns
    with the others, rather than one stretch of the machine.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._postmaster = _postmaster_pid(conn)

    def run(self, base_url: str, load: wrk.Load) -> tuple[wrk.Result, Cost]:
        wal_before = _scalar(self._conn, "SELECT pg_current_wal_lsn()")
        python, postgres = _cpu_seconds("tests.bench.wsgi"), _postgres_cpu(self._postmaster)
        children = _children_cpu()
        result = wrk.run(base_url, load, seconds=SECONDS)
        cost = Cost(
            requests=result.requests,
            wrk_s=_children_cpu() - children,
            python_s=_cpu_seconds("tests.bench.wsgi") - python,
            postgres_s=_postgres_cpu(self._postmaster) - postgres,
            wal=float(
                _scalar(
                    self._conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [wal_before]
                )
            ),
        )
        return result, cost


def _cpu_seconds(marker: str) -> float:
    """CPU so far of the live processes whose command line names ``marker``, and of
    the children they reaped."""
    return sum(
        _cpu_of(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and marker in _command_line(entry.name)
    )


def _postgres_cpu(postmaster: int) -> float:
    """CPU so far of the bench database's backends, and of those that ended.

    Backends that ended are in the postmaster's reaped children, with those
    of every other database: the figure is right on a machine left alone.
    """
    return _cpu_seconds(DATABASE) + _cpu_of(str(postmaster), own=False)


def _cpu_of(pid: str, *, own: bool = True) -> float:
    """User and system CPU of a process (``own``) and of the children it reaped."""
    try:
        # After the name in parentheses: the state is field 3 of stat(5), and
        # utime, stime, cutime and cstime fields 14 to 17.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0  # ended meanwhile
    ticks = (int(fields[11]) + int(fields[12]) if own else 0) + int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _command_line(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def _postmaster_pid(conn: psycopg.Connection[Any]) -> int:
    data_directory = _scalar(conn, "SHOW data_directory")
    return int((Path(data_directory) / "postmaster.pid").read_text().split()[0])


def _scalar(conn: psycopg.Connection[Any], sql: str, params: list[Any] | None = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]
