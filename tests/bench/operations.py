"""Benchmark: what an operator reads, at 10^3 and at 10^6 ended operations.

``python -m tests.bench.operations`` (``make bench-operations``). Starts the
service as deployed (gunicorn, two workers) on a PostgreSQL database of its
own, ``order_service_bench_operations``, with 100 operations processing,
and fills the operations table with ended ones in bulk (``INSERT … SELECT
generate_series``), ended one every two seconds back from two hours ago (10^6 span
23 days of ``OPERATION_RETENTION``'s 30):
first 10^3, then 10^6 in all. At each size, after ``VACUUM ANALYZE`` (what
autovacuum does as a table grows), it times:

- a scrape of ``/metrics``, the median of 20 after one unmeasured; it
  holds every gauge read at scrape time, the operations gauge among them;
- the operations gauge's own statements at the database, the median of 50
  (``operations{kind, status}`` and the oldest processing operation of each
  kind), which a busy machine blurs far less;
- ``manage.py operations``'s statements the same way (the processing ones
  and those ended within the last hour).

It prints each figure and the ratio of 10^6 to 10^3: a flat cost is a ratio
near 1.0. The whole run takes about a minute, and drops its database.

Not a test: timings belong here, not in assertions (the test,
tests/operations/test_operator_cost.py, counts rows read instead).
"""

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
import requests

from tests.bench import service

DATABASE = "order_service_bench_operations"
SIZES = (10**3, 10**6)
PROCESSING = 100
TIMEOUT = 30
KINDS = ("payment.charge", "order.refund", "webhook.deliver")

# The statements as Django sends them (operations.selectors), with the
# kinds and the hour spelled out.
GAUGE = [
    "SELECT kind, COUNT(*) AS n FROM operations_operation"
    " WHERE status = 'processing' GROUP BY kind",
    *(
        "SELECT * FROM operations_operation WHERE status = 'processing'"  # noqa: S608 - our kinds
        f" AND kind = '{kind}' ORDER BY created_at ASC LIMIT 1"
        for kind in KINDS
    ),
]
COMMAND = [
    "SELECT kind, status, COUNT(id), SUM(attempts), SUM(publications)"
    " FROM operations_operation WHERE status = 'processing'"
    " GROUP BY kind, status ORDER BY kind, status",
    "SELECT kind, status, COUNT(id), SUM(attempts), SUM(publications)"
    " FROM operations_operation WHERE status IN ('succeeded', 'failed')"
    " AND updated_at >= now() - interval '1 hour'"
    " GROUP BY kind, status ORDER BY kind, status",
    "SELECT * FROM operations_operation WHERE status = 'processing'"
    " ORDER BY attempts DESC, created_at ASC LIMIT 10",
]


@dataclass(frozen=True)
class Costs:
    ended: int
    scrape_ms: float
    gauge_ms: float
    command_ms: float


def fill(conn: psycopg.Connection, *, first: int, last: int, tenant: int) -> None:
    """Ended operations numbered ``first`` to ``last``: one every 2 s, back from 2 hours ago.

    None in the last hour: what the command reads of those is an hour's
    work, whatever the table holds, and is left out of the comparison.
    """
    conn.execute(
        "INSERT INTO operations_operation (id, tenant_id, kind, status, result_id, error_code,"
        " error_message, attempts, publications, republish_at, trace_id, created_at, updated_at)"
        " SELECT 'op_b' || g, %(tenant)s, 'payment.charge',"
        " CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END, 'pay_b' || g, '', '',"
        " 1, 1, now(), '', now() - interval '2 hours' - g * interval '2 seconds',"
        " now() - interval '2 hours' - g * interval '2 seconds'"
        " FROM generate_series(%(first)s::int, %(last)s::int) AS g",
        {"tenant": tenant, "first": first, "last": last},
    )
    # What autovacuum does to a table that grew by inserts (PostgreSQL 13 on):
    # its statistics, and the visibility map and hint bits of the new rows.
    conn.execute("VACUUM ANALYZE operations_operation")


def add_processing(conn: psycopg.Connection, *, tenant: int) -> None:
    conn.execute(
        "INSERT INTO operations_operation (id, tenant_id, kind, status, result_id, error_code,"
        " error_message, attempts, publications, republish_at, trace_id, created_at, updated_at)"
        " SELECT 'op_p' || g, %(tenant)s, (%(kinds)s::text[])[1 + g %% 3], 'processing',"
        " 'pay_p' || g, '', '', 1, 1, now() + interval '1 hour', '', now(), now()"
        " FROM generate_series(1, %(count)s::int) AS g",
        {"tenant": tenant, "kinds": list(KINDS), "count": PROCESSING},
    )


def median_ms(action: Callable[[], object], n: int) -> float:
    """Median milliseconds of ``action``, after one unmeasured."""
    action()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def statements_ms(conn: psycopg.Connection, statements: list[str], n: int = 50) -> float:
    def run() -> None:
        for statement in statements:
            conn.execute(statement).fetchall()

    return median_ms(run, n)


def measure(conn: psycopg.Connection, base_url: str, ended: int) -> Costs:
    return Costs(
        ended=ended,
        scrape_ms=median_ms(
            lambda: requests.get(base_url + "/metrics", timeout=TIMEOUT).raise_for_status(), 20
        ),
        gauge_ms=statements_ms(conn, GAUGE),
        command_ms=statements_ms(conn, COMMAND),
    )


def main() -> None:
    started = time.monotonic()
    env, _ = service.prepare(DATABASE)
    results = []
    with (
        service.serving(env) as live,
        psycopg.connect(env["DATABASE_URL"], autocommit=True) as conn,
    ):
        (tenant,) = conn.execute("SELECT id FROM accounts_tenant LIMIT 1").fetchone() or (None,)
        assert tenant is not None, "seed_demo made no tenant"
        add_processing(conn, tenant=tenant)
        done = 0
        for size in SIZES:
            fill(conn, first=done + 1, last=size, tenant=tenant)
            done = size
            costs = measure(conn, live.base_url, size)
            results.append(costs)
            print(
                f"{size:>9,} ended operations: scrape {costs.scrape_ms:.1f} ms,"
                f" gauge statements {costs.gauge_ms:.2f} ms,"
                f" operations command statements {costs.command_ms:.2f} ms",
                flush=True,
            )
    small, large = results
    print(
        f"10^6 / 10^3: scrape {large.scrape_ms / small.scrape_ms:.2f},"
        f" gauge statements {large.gauge_ms / small.gauge_ms:.2f},"
        f" command statements {large.command_ms / small.command_ms:.2f}"
    )
    service.drop(DATABASE)
    print(f"(the whole bench took {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
