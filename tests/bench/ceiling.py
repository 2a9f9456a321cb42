"""PostgreSQL's ceiling for a command: its minimal transaction, run by pgbench.

A command's first execution cannot be faster than the statements it
must send. Each script of tests/bench/ceiling/ is that transaction for one
command, written by hand against the service's tables, with rows of the
sizes the bench's own requests write; pgbench runs it with 8 clients over
the simple protocol (as Django sends statements), in the same rounds as
the service's loads (tests/bench/bench.py), so ``create/ceiling`` and
``payment/ceiling`` compare the service with what PostgreSQL alone does
on the same machine at the same moment. docs/SCALING.md, "First executions
against PostgreSQL's ceiling", says what each transaction is, and what a
command does beyond it.

Each payment needs an order no other payment holds (one live payment an
order, ``payment_one_live_per_order``): :func:`unpaid_orders` makes them
beforehand, in one statement, for pgbench's clients and for wrk alike.
"""

import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

PGBENCH = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
SCRIPTS = Path(__file__).parent / "ceiling"
CLIENTS = 8
# Every order the benches pay: one line of two ABC at the seeded price.
TOTAL_AMOUNT = 3980


@dataclass(frozen=True)
class Caller:
    """The bench's API client as the scripts name it: its token's digest, principal, tenant."""

    digest: str
    principal: int
    tenant: int

    @classmethod
    def of(cls, conn: psycopg.Connection[Any], token: str) -> "Caller":
        digest = hashlib.sha256(token.encode()).hexdigest()
        row = conn.execute(
            "SELECT t.principal_id, p.tenant_id FROM accounts_apitoken t"
            " JOIN accounts_principal p ON p.id = t.principal_id WHERE t.digest = %s",
            [digest],
        ).fetchone()
        assert row is not None, "the bench's token is not in its database"
        return cls(digest=digest, principal=row[0], tenant=row[1])


def create_orders(url: str, caller: Caller, *, seconds: float) -> float:
    """Transactions a second of the minimal idempotent create, over ``seconds``."""
    return _pgbench(url, "create_order.sql", caller, [f"--time={max(1, round(seconds))}"])


def start_payments(
    url: str, conn: psycopg.Connection[Any], caller: Caller, *, round_: int, each: int
) -> float:
    """Transactions a second of the minimal idempotent payment, ``each`` per client.

    A count rather than a time: each transaction pays an order of its own,
    made beforehand (``ord_g<round>-<client>-<n>``).
    """
    for client in range(CLIENTS):
        unpaid_orders(conn, caller, prefix=f"ord_g{round_}-{client}-", count=each)
    conn.execute("CHECKPOINT")
    return _pgbench(
        url,
        "start_payment.sql",
        caller,
        [f"--transactions={each}", f"--define=round={round_}", "--define=n=0"],
    )


def unpaid_orders(
    conn: psycopg.Connection[Any], caller: Caller, *, prefix: str, count: int
) -> None:
    """Orders ``<prefix>1`` … ``<prefix><count>`` of the caller's tenant, with their line."""
    conn.execute(
        "INSERT INTO orders_order (internal_id, id, tenant_id, customer_id, status, currency,"
        " total_amount, cancel_reason, created_at, updated_at)"
        " SELECT %(prefix)s || n, %(prefix)s || n, %(tenant)s, 'bench', 'pending', 'RUB',"
        " %(total)s, '', now(), now() FROM generate_series(1, %(count)s) AS n",
        {"prefix": prefix, "tenant": caller.tenant, "total": TOTAL_AMOUNT, "count": count},
    )
    conn.execute(
        "INSERT INTO orders_orderitem (position, sku, qty, unit_price, line_total, order_id)"
        " SELECT 0, 'ABC', 2, %(total)s / 2, %(total)s, %(prefix)s || n"
        " FROM generate_series(1, %(count)s) AS n",
        {"prefix": prefix, "total": TOTAL_AMOUNT, "count": count},
    )


def _pgbench(url: str, script: str, caller: Caller, extra: list[str]) -> float:
    finished = subprocess.run(
        [
            PGBENCH,
            "--no-vacuum",
            f"--client={CLIENTS}",
            "--jobs=2",
            "--protocol=simple",
            f"--define=principal={caller.principal}",
            f"--define=tenant={caller.tenant}",
            f"--define=digest={caller.digest}",
            *extra,
            f"--file={SCRIPTS / script}",
            url,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"^tps = ([\d.]+)", finished.stdout, re.MULTILINE)
    failed = re.search(r"^number of failed transactions: (\d+)", finished.stdout, re.MULTILINE)
    if finished.returncode or found is None or (failed and failed.group(1) != "0"):
        raise RuntimeError(f"pgbench {script} failed:\n{finished.stdout}{finished.stderr}")
    return float(found.group(1))
