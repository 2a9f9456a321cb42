"""Benchmark: the idempotency key table at 10^3 to 10^6 rows, and its purge.

``python -m tests.bench.keys`` (or its functions, from ``make bench``).
Starts the service as deployed (gunicorn, two workers) on a PostgreSQL
database of its own, ``order_service_bench_keys``, and drives it with wrk:

a. The table grows to 10^3, 10^4, 10^5 and 10^6 keys, filled in bulk with
   SQL: rows shaped like the service's own (a real order's stored answer
   and field digests, copied), random keys spread over 100 principals,
   expiring over the next 24 hours. At each size wrk measures first
   executions of ``POST /v1/orders`` (a fresh key per request) and replays
   of one key: requests/s, p50 and p99; and, timed at the database alone,
   the claim's INSERT and the replay's SELECT, which a busy machine blurs
   far less. A flat table is a ratio of 10^6 / 10^3 near 1.0.
b. 10^6 more keys, all expired, are added, and the purge
   (``manage.py purge_idempotency_keys``, in its own process) deletes them
   while wrk keeps creating orders. It prints the create rate during the
   purge as a share of its rate without, the create p99 without and during
   the purge, and the purge's duration.

gunicorn's worker recycling (``max_requests``) is turned off here: a worker
restarting mid-run is a latency spike that has nothing to do with the key
table. The whole run takes two and a half to three minutes, and drops its
database (some 2 GB) when it succeeds. ``--batch-sizes 1000 5000`` and
``--pauses 0 0.05`` repeat part b for each batch size and pause between
batches (by default the command's), ``--skip-growth`` leaves part a out.

Not a test: timings belong here, not in assertions.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import requests

from tests.bench import service, wrk
from tests.support.live import ROOT

DATABASE = "order_service_bench_keys"
ORDER: dict[str, Any] = {
    "customerId": "bench",
    "items": [{"sku": "ABC", "qty": 2}],
    "currency": "RUB",
}
_BODY = json.dumps(ORDER)

SIZES = (10**3, 10**4, 10**5, 10**6)
EXPIRED = 10**6
# Keys of the fill are spread over this many principals of one tenant, as
# a busy tenant's integrations would spread them.
PRINCIPALS = 100
# As many connections as the service has threads (2 workers x 8 threads):
# every thread busy, none of wrk's requests queued in the kernel for long.
CONNECTIONS = 16
SECONDS = 5
# A request slower than this counts as an error, not a latency: longer than
# wrk.run's default, so that a create that the purge holds up is still a
# latency, counted in the p99 during the purge.
TIMEOUT = 30
TTL = timedelta(hours=24)


@dataclass(frozen=True)
class Target:
    """The service under test, and the loads that wrk drives against it."""

    base_url: str
    token: str
    database_url: str
    env: dict[str, str]

    def create_load(self) -> wrk.Load:
        """First executions of ``POST /v1/orders``: a fresh key per request, scattered."""
        return wrk.Load(
            "POST", "/v1/orders", self._headers(), _BODY, fresh_keys=True, scatter_keys=True
        )

    def replay_load(self, key: str) -> wrk.Load:
        """Replays of ``POST /v1/orders`` under ``key``."""
        return wrk.Load("POST", "/v1/orders", self._headers(), _BODY, key=key)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}


def measure(target: Target, load: wrk.Load, *, seconds: float = SECONDS) -> wrk.Result:
    """One wrk run of ``load``; failed requests are counted and printed, not fatal."""
    return wrk.run(
        target.base_url,
        load,
        connections=CONNECTIONS,
        seconds=seconds,
        timeout=TIMEOUT,
        allow_failures=True,
    )


def figures(result: wrk.Result) -> str:
    """``1234 req/s  p50    5.1 ms  p99   20.3 ms``, and the failures if any."""
    errors = f"  ({result.failed} errors)" if result.failed else ""
    latency = f"p50 {result.p50_ms:6.1f} ms  p99 {result.p99_ms:6.1f} ms"
    return f"{result.rate:5.0f} req/s  {latency}{errors}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.keys", description=__doc__)
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=[],
        help="purge with each of these batch sizes in turn (default: the command's default)",
    )
    parser.add_argument(
        "--pauses",
        type=float,
        nargs="+",
        default=[],
        help="purge with each of these pauses between batches in turn (s)",
    )
    parser.add_argument("--seconds", type=float, default=SECONDS, help="each wrk run (s)")
    parser.add_argument("--skip-growth", action="store_true", help="fill to 10^6 at once")
    options = parser.parse_args(argv)

    started = time.monotonic()
    env, token = service.prepare(DATABASE)
    with service.serving(env) as live:
        target = Target(live.base_url, token, env["DATABASE_URL"], env)
        replay_key = prepare(target)
        if options.skip_growth:
            fill_live_keys(target, upto=SIZES[-1])
        else:
            growth(target, replay_key, seconds=options.seconds)
        for batch_size in options.batch_sizes or [None]:
            for pause in options.pauses or [None]:
                purge_under_load(
                    target, batch_size=batch_size, pause=pause, seconds=options.seconds
                )
    # 2 million rows are not worth keeping.
    service.drop(DATABASE)
    print(f"(the whole bench took {time.monotonic() - started:.0f} s)")


def prepare(target: Target) -> str:
    """Warm the service up, make the key that replays will use, add the fill's principals.

    Returns the replayed key. Its row is also the template of every row the
    fill inserts.
    """
    measure(target, target.create_load(), seconds=2)
    key = "bench-replayed"
    answer = requests.post(
        target.base_url + "/v1/orders",
        json=ORDER,
        headers={"Authorization": f"Bearer {target.token}", "Idempotency-Key": key},
        timeout=30,
    )
    answer.raise_for_status()
    with psycopg.connect(target.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO accounts_principal (tenant_id, name, created_at)"
            " SELECT p.tenant_id, 'fill-' || g, now()"
            " FROM accounts_principal p, generate_series(2, %s) g WHERE p.name = 'bench'",
            [PRINCIPALS],
        )
        size = conn.execute(
            "SELECT length(a.body), length(k.field_digests::text)"
            " FROM idempotency_idempotencykey k"
            " JOIN idempotency_storedanswer a ON a.key_id = k.id WHERE k.key = %s",
            [key],
        ).fetchone()
    assert size is not None
    print(f"each key row: a stored answer of {size[0]} bytes, field digests of {size[1]} bytes")
    return key


# Copies of the template row (the replayed key's) and its answer under
# random keys, spread over the tenant's principals. Row g of the fill was
# created at origin + g * step, so rows lie in the table in the order of
# their expiry, as rows that a service inserted over a day do.
_FILL = """
WITH template AS (
    SELECT k.*, a.status, a.body, a.headers
    FROM idempotency_idempotencykey k
    JOIN idempotency_storedanswer a ON a.key_id = k.id
    WHERE k.key = %(template)s
), principals AS (
    SELECT array_agg(id ORDER BY id) AS ids FROM accounts_principal
    WHERE tenant_id = (SELECT tenant_id FROM template)
), keys AS (
    INSERT INTO idempotency_idempotencykey
        (tenant_id, principal_id, key, request_method, request_path, fingerprint,
         field_digests, created_at, expires_at)
    SELECT t.tenant_id, p.ids[1 + g %% array_length(p.ids, 1)], gen_random_uuid()::text,
           t.request_method, t.request_path, encode(sha256(g::text::bytea), 'hex'),
           t.field_digests, %(origin)s + g * %(step)s, %(origin)s + g * %(step)s + %(ttl)s
    FROM template t, principals p, generate_series(%(first)s::bigint, %(last)s::bigint) g
    RETURNING id
)
INSERT INTO idempotency_storedanswer (key_id, status, body, headers)
SELECT keys.id, t.status, t.body, t.headers FROM keys, template t
"""


def _fill(target: Target, *, first: int, last: int, origin: str, span: timedelta) -> float:
    """Insert rows ``first``..``last`` of a fill of 10^6 spread over ``span``; returns seconds."""
    started = time.perf_counter()
    with psycopg.connect(target.database_url, autocommit=True) as conn:
        conn.execute(
            _FILL,
            {
                "template": "bench-replayed",
                "origin": conn.execute(f"SELECT {origin}").fetchone()[0],  # type: ignore[index]
                "step": span / 10**6,
                "ttl": TTL,
                "first": first,
                "last": last,
            },
        )
        # As autovacuum would have, on a table that grew over a day: the
        # planner's statistics and the visibility map are up to date.
        conn.execute("VACUUM (ANALYZE) idempotency_idempotencykey, idempotency_storedanswer")
        # And the fill's gigabyte written out now, not by the checkpointer
        # while wrk measures.
        conn.execute("CHECKPOINT")
    return time.perf_counter() - started


def key_count(target: Target) -> int:
    with psycopg.connect(target.database_url) as conn:
        row = conn.execute("SELECT count(*) FROM idempotency_idempotencykey").fetchone()
    assert row is not None
    return int(row[0])


def fill_live_keys(target: Target, *, upto: int) -> float:
    """Grow the table to ``upto`` unexpired keys, created over the last 23 hours.

    Returns the seconds it took (none if the table already has that many).
    """
    have = key_count(target)
    if upto <= have:
        return 0.0
    # Created from 23 h ago to now: they expire over the next 1 to 24 h.
    return _fill(
        target,
        first=have + 1,
        last=upto,
        origin="now() - interval '23 hours'",
        span=timedelta(hours=23),
    )


@dataclass(frozen=True)
class StatementCost:
    """The key tables' share of a first execution and of a replay, timed at the database (µs)."""

    claim_us: float
    replay_us: float


def statement_costs(target: Target, key: str, *, n: int = 500) -> StatementCost:
    """Medians of ``n`` first executions' writes of new keys and ``n`` replay SELECTs of ``key``.

    The same statements as the service's (parameters bound in the client,
    as Django does), from this process, without HTTP, gunicorn or the rest
    of the command: what the tables' size can change, told apart from what
    a busy machine does to the service's figures. A first execution writes
    two rows, the claim's key and the stored answer, timed together. The
    INSERTs share one transaction, so that no commit's WAL flush hides
    their cost.
    """
    with psycopg.connect(target.database_url, prepare_threshold=None) as conn:
        template = conn.execute(
            "SELECT k.tenant_id, k.principal_id, k.request_method, k.request_path,"
            " k.fingerprint, k.field_digests::text, a.status, a.body, a.headers::text"
            " FROM idempotency_idempotencykey k"
            " JOIN idempotency_storedanswer a ON a.key_id = k.id WHERE k.key = %s",
            [key],
        ).fetchone()
        assert template is not None
        tenant, principal, *request, status, body, headers = template
        claims = []
        for _ in range(n):
            started = time.perf_counter()
            row = conn.execute(
                "INSERT INTO idempotency_idempotencykey (tenant_id, principal_id, key,"
                " request_method, request_path, fingerprint, field_digests, created_at,"
                " expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, now(),"
                " now() + interval '24 hours') RETURNING id",
                [tenant, principal, str(uuid.uuid4()), *request],
            ).fetchone()
            assert row is not None
            conn.execute(
                "INSERT INTO idempotency_storedanswer (key_id, status, body, headers)"
                " VALUES (%s, %s, %s, %s::jsonb)",
                [row[0], status, body, headers],
            )
            claims.append(time.perf_counter() - started)
        conn.commit()
        replays = []
        for _ in range(n):
            started = time.perf_counter()
            conn.execute(
                # The replay's look-up (commands.py), in a statement of its own.
                "SELECT * FROM idempotency_idempotencykey k"
                " JOIN idempotency_storedanswer a ON a.key_id = k.id"
                " WHERE k.principal_id = %s AND k.tenant_id = %s AND k.key = %s"
                " ORDER BY k.id LIMIT 1",
                [principal, tenant, key],
            ).fetchone()
            conn.commit()
            replays.append(time.perf_counter() - started)
    return StatementCost(
        claim_us=statistics.median(claims) * 1e6, replay_us=statistics.median(replays) * 1e6
    )


def growth(target: Target, replay_key: str, *, seconds: float) -> None:
    """Part a: claims and replays through the service as the table grows.

    Beside wrk's figures, each size gets the database's own cost of a
    claim's INSERT and a replay's SELECT (``statement_costs``), and what a
    scrape of ``/metrics`` takes (``scrape_ms``), which reads the key
    table's size and the purge's lag.
    """
    rows: list[tuple[wrk.Result, wrk.Result, StatementCost, float]] = []
    print(f"a. key table growth: wrk, 1 thread, {CONNECTIONS} connections, {seconds:g} s each;")
    print(
        "   INSERTs and SELECT: a first execution's two writes and the replay's read alone,"
        " median µs"
    )
    print(
        f"  {'keys':>9}  {'claim req/s':>11} {'p50 ms':>7} {'p99 ms':>7}"
        f"  {'replay req/s':>12} {'p50 ms':>7} {'p99 ms':>7}"
        f"  {'INSERT':>6} {'SELECT':>6}  {'scrape ms':>9}  errors  (filled in)"
    )
    for size in SIZES:
        fill_s = fill_live_keys(target, upto=size)
        claim = measure(target, target.create_load(), seconds=seconds)
        replay = measure(target, target.replay_load(replay_key), seconds=seconds)
        cost = statement_costs(target, replay_key)
        scrape = scrape_ms(target)
        rows.append((claim, replay, cost, scrape))
        print(
            f"  {size:>9,}  {claim.rate:11.0f} {claim.p50_ms:7.1f} {claim.p99_ms:7.1f}"
            f"  {replay.rate:12.0f} {replay.p50_ms:7.1f} {replay.p99_ms:7.1f}"
            f"  {cost.claim_us:6.0f} {cost.replay_us:6.0f}  {scrape:9.1f}"
            f"  {claim.failed + replay.failed:6d}  ({fill_s:.1f} s)"
        )
    (claim_1k, replay_1k, cost_1k, scrape_1k) = rows[0]
    (claim_1m, replay_1m, cost_1m, scrape_1m) = rows[-1]
    print(
        f"  10^6 / 10^3: claim {claim_1m.rate / claim_1k.rate:.2f} req/s,"
        f" {claim_1m.p99_ms / claim_1k.p99_ms:.2f} p99,"
        f" {cost_1m.claim_us / cost_1k.claim_us:.2f} INSERT;"
        f" replay {replay_1m.rate / replay_1k.rate:.2f} req/s,"
        f" {replay_1m.p99_ms / replay_1k.p99_ms:.2f} p99,"
        f" {cost_1m.replay_us / cost_1k.replay_us:.2f} SELECT;"
        f" scrape {scrape_1m / scrape_1k:.2f}"
    )


def scrape_ms(target: Target, n: int = 20) -> float:
    """Median milliseconds of a ``/metrics`` scrape, after one unmeasured."""
    times = []
    for _ in range(n + 1):
        started = time.perf_counter()
        requests.get(target.base_url + "/metrics", timeout=TIMEOUT).raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[1:])


_PURGED = re.compile(r"Purged (\d+) expired idempotency keys in ([\d.]+) s")


def add_expired_keys(target: Target, count: int = EXPIRED) -> float:
    """Add ``count`` keys that expired between 24 h and 1 h ago; returns seconds taken."""
    start = 10**7 + key_count(target)  # row numbers of their own, for their fingerprints
    return _fill(
        target,
        first=start,
        last=start + count - 1,
        # Row g is created at origin + g * step: start them 48 h ago.
        origin=f"now() - interval '48 hours' - {start} * interval '23 hours' / 1000000",
        span=timedelta(hours=23),
    )


def purge_under_load(
    target: Target, *, batch_size: int | None = None, pause: float | None = None, seconds: float
) -> None:
    """Part b: purge 10^6 expired keys while wrk creates orders, against wrk alone."""
    fill_s = add_expired_keys(target)
    label = f"batches of {batch_size}" if batch_size else "default batch size"
    if pause is not None:
        label += f", {pause:g} s between batches"
    print(f"b. purge of {EXPIRED:,} expired keys beside {key_count(target) - EXPIRED:,} live ones")
    print(f"  ({label}; inserted in {fill_s:.1f} s)")
    quiet = measure(target, target.create_load(), seconds=seconds)
    print(f"  creates without purge: {figures(quiet)}")
    args = ["purge_idempotency_keys"]
    if batch_size:
        args += ["--batch-size", str(batch_size)]
    if pause is not None:
        args += ["--pause", str(pause)]
    output, during = run_under_load(target, *args)
    print(f"  creates during purge:  {figures(during)}")
    print(f"  {output.strip()}")
    match = _PURGED.search(output)
    assert match is not None, output
    deleted, purge_s = int(match[1]), float(match[2])
    print(
        f"create rate: {during.rate / quiet.rate:.2f} of its rate without purge;"
        f" p99: {quiet.p99_ms:.1f} ms without purge, {during.p99_ms:.1f} ms during purge"
        f" (Y/X = {during.p99_ms / quiet.p99_ms:.2f})"
    )
    print(f"purge: {deleted:,} keys in {purge_s:.1f} s ({deleted / purge_s:,.0f} keys/s)")


def run_under_load(target: Target, *args: str) -> tuple[str, wrk.Result]:
    """Run ``manage.py *args`` while wrk creates orders; returns its output and wrk's figures.

    wrk starts when the command prints its first line (the purge's
    "Purging …"), so Django's start-up is not part of the window measured,
    and stops when the command exits.
    """
    command = subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=target.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert command.stdout is not None
    first = command.stdout.readline()
    load = wrk.Background(
        target.base_url,
        target.create_load(),
        connections=CONNECTIONS,
        seconds=600,
        timeout=TIMEOUT,
        allow_failures=True,
    )
    try:
        rest, _ = command.communicate(timeout=600)
    finally:
        during = load.stop()
    if command.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{first}{rest}")
    return first + rest, during


if __name__ == "__main__":
    main()
