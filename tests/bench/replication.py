"""What a synchronous standby costs (``make bench-replication``): first executions, as a ratio.

Starts the service as ``make bench`` does (tests/bench/service.py), on a
Patroni cluster of two nodes (tests/support/patroni.py) through the
multi-host URL, and measures with wrk first executions of ``POST
/v1/orders`` (a fresh key each) from 16 clients and from one, with the
cluster's ``synchronous_mode`` on and off by turns, switched through
Patroni's REST API as an operator would. Every commit of a command then
waits, or does not, for the standby to have it on disk: one more round trip
and the standby's flush per command.

``BENCH_LINK_DELAY_MS`` (0) holds each byte between the nodes that long on
its way, both ways (tests.support.faults.DelayedLink): a standby in another
zone (1 ms or so) or region (tens). ``BENCH_ROUNDS`` (10) and
``BENCH_SECONDS`` (2) size the run, as in ``make bench``.

Not a test: timings belong here, not in assertions.
"""

import json
import os
import statistics
import tempfile

import psycopg

from tests.bench import service, wrk
from tests.support.live import base_env, manage
from tests.support.patroni import PatroniCluster
from tests.support.waits import wait_for

ORDER = {"customerId": "bench", "items": [{"sku": "ABC", "qty": 2}], "currency": "RUB"}
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "10"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "2"))
LINK_DELAY_MS = float(os.environ.get("BENCH_LINK_DELAY_MS", "0"))


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="bench-replication-") as var_dir,
        PatroniCluster(link_delay_s=LINK_DELAY_MS / 1000) as cluster,
    ):
        cluster.create_database("orders")
        env = base_env(
            DATABASE_URL=cluster.url("orders"),
            CELERY_BROKER_URL=service.BROKER_URL,
            SECRET_KEY="bench-replication",
            VAR_DIR=var_dir,
            LOG_LEVEL="WARNING",
        )
        manage("migrate", "--noinput", env=env)
        manage("seed_demo", env=env)
        token = manage("create_api_client", "bench", "bench", env=env).strip().splitlines()[-1]
        with service.serving(env) as live:
            measure(cluster, live.base_url, token)


def measure(cluster: PatroniCluster, base_url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    first = wrk.Load("POST", "/v1/orders", headers, json.dumps(ORDER), fresh_keys=True)
    wrk.run(base_url, first, seconds=2)  # warm up connections, caches and code paths
    # 16 clients load the service as make bench does; one client alone shows
    # what a synchronous commit adds to a command's latency, which 16 hide
    # behind each other's work while the CPU is what limits them.
    busy: dict[bool, list[wrk.Result]] = {True: [], False: []}
    alone: dict[bool, list[wrk.Result]] = {True: [], False: []}
    for round_ in range(ROUNDS):
        for synchronous in (True, False) if round_ % 2 == 0 else (False, True):
            set_synchronous(cluster, synchronous)
            busy[synchronous].append(wrk.run(base_url, first, seconds=SECONDS))
            alone[synchronous].append(wrk.run(base_url, first, connections=1, seconds=SECONDS))
    print(
        f"first executions, POST /v1/orders, wrk, {ROUNDS} interleaved rounds of {SECONDS:g} s"
        f" per load; the standby {LINK_DELAY_MS:g} ms away each way"
        " (median, range; p50 and p99 latency of the median round):"
    )
    for label, results in (("16 clients", busy), ("1 client", alone)):
        for synchronous, mode in ((False, "asynchronous standby"), (True, "synchronous standby")):
            rates = [r.rate for r in results[synchronous]]
            ordered = sorted(results[synchronous], key=lambda r: r.rate)
            median = ordered[len(ordered) // 2]
            print(
                f"  {label:10s} {mode:21s} {statistics.median(rates):6.0f} req/s"
                f" ({min(rates):.0f}-{max(rates):.0f})"
                f"  p50 {median.p50_ms:5.1f} ms  p99 {median.p99_ms:5.1f} ms"
            )
        ratios = [s.rate / a.rate for s, a in zip(results[True], results[False], strict=True)]
        print(
            f"  {label:10s} {'synchronous / asynchronous':21s} {statistics.median(ratios):6.2f}"
            f" ({min(ratios):.2f}-{max(ratios):.2f})"
        )


def set_synchronous(cluster: PatroniCluster, synchronous: bool) -> None:
    """Switch ``synchronous_mode``; returns once the primary applies it."""
    cluster.set_synchronous(synchronous)
    expected = cluster.standby().name if synchronous else ""

    def names() -> str | None:
        with psycopg.connect(cluster.url("orders"), autocommit=True) as db:
            row = db.execute("SHOW synchronous_standby_names").fetchone()
        return None if row is None else str(row[0])

    wait_for(
        names,
        lambda found: found == expected,
        30,
        interval=0.1,
        what=f"the primary applying synchronous_mode ({expected!r} synchronous)",
    )


if __name__ == "__main__":
    main()
