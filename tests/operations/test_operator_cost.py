"""What an operator reads costs the same however many ended operations are kept.

Ended operations pile up for ``OPERATION_RETENTION`` (30 days); the
operations gauge at ``/metrics`` and ``manage.py operations`` must not read
them (docs/SPECIFICATION.md §4, Operations). Timing would say so only
noisily; PostgreSQL's own account of each statement does not: with
``EXPLAIN ANALYZE`` every scan says how many rows it returned and how many
it read and threw away. Those numbers must stay at the processing
operations' count beside 5,000 ended ones.
"""

import io
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Tenant
from operations.models import Operation
from operations.retention import purge
from operations.services import finish_operation

pytestmark = pytest.mark.django_db

ENDED = 5000
TABLE = Operation._meta.db_table


@pytest.fixture
def tenant() -> Tenant:
    return Tenant.objects.create(slug="cost")


def add_ended(tenant: Tenant, count: int) -> None:
    """``count`` operations that ended two days ago, in one statement, and fresh statistics."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (id, tenant_id, kind, status, result_id, error_code,"  # noqa: S608
            " error_message, attempts, publications, republish_at, trace_id, created_at,"
            " updated_at)"
            " SELECT 'op_ended' || g, %s, 'payment.charge',"
            " CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END, 'pay_ended' || g,"
            " '', '', 1, 1, now(), '', now() - interval '2 days', now() - interval '2 days'"
            " FROM generate_series(1, %s) AS g",
            [tenant.pk, count],
        )
        # What autovacuum would have done by the time so many have ended.
        cursor.execute(f"ANALYZE {TABLE}")


def add_processing(tenant: Tenant) -> None:
    for n, kind in enumerate(["payment.charge", "payment.charge", "order.refund"]):
        Operation.objects.create(tenant=tenant, kind=kind, result_id=f"pay_live{n}")


def rows_read(plan: dict[str, Any]) -> int:
    """Rows every scan of ``plan`` read: those it returned and those its filter threw away."""
    loops = plan.get("Actual Loops", 1)
    read = 0
    if "Scan" in plan["Node Type"]:
        read = (plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)) * loops
    return read + sum(rows_read(child) for child in plan.get("Plans", []))


def operations_statements(read: Callable[[], object]) -> Iterator[str]:
    """The statements ``read`` runs on the operations table, as sent."""
    with CaptureQueriesContext(connection) as captured:
        read()
    for query in captured.captured_queries:
        if TABLE in query["sql"]:
            yield query["sql"]


def most_rows_read(read: Callable[[], object]) -> tuple[int, int]:
    """How many statements ``read`` runs on the operations table, and the most rows one reads."""
    most = count = 0
    for sql in operations_statements(read):
        count += 1
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
            (document,) = cursor.fetchone()
        plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
        most = max(most, rows_read(plan))
    return count, most


def scrape(client: Client) -> None:
    assert client.get("/metrics").status_code == 200


def test_a_scrape_reads_the_processing_operations_alone(tenant: Tenant, client: Client) -> None:
    add_processing(tenant)
    statements_before, _ = most_rows_read(lambda: scrape(client))

    add_ended(tenant, ENDED)
    statements, most = most_rows_read(lambda: scrape(client))

    # The count of processing operations, the oldest of each kind, and
    # those out of attempts.
    assert statements == statements_before == 5
    assert most <= 3, f"a statement of the scrape read {most} rows"


def test_the_operations_gauge_counts_ended_operations_as_they_end_and_are_purged(
    tenant: Tenant, client: Client, settings: Any
) -> None:
    add_processing(tenant)
    for n, succeeded in enumerate([True, True, False]):
        operation = Operation.objects.create(
            tenant=tenant, kind="payment.charge", result_id=f"pay_ends{n}"
        )
        assert finish_operation(operation, succeeded=succeeded)
        assert not finish_operation(operation, succeeded=succeeded)  # counted once

    def gauge() -> set[str]:
        text = client.get("/metrics").content.decode()
        family = text.split("# HELP operations ")[1].split("# HELP")[0]
        return {line for line in family.splitlines() if 'kind="payment.charge"' in line}

    assert gauge() == {
        'operations{kind="payment.charge",status="processing"} 2.0',
        'operations{kind="payment.charge",status="succeeded"} 2.0',
        'operations{kind="payment.charge",status="failed"} 1.0',
    }
    Operation.objects.exclude(status=Operation.Status.PROCESSING).filter(
        status=Operation.Status.SUCCEEDED
    ).update(updated_at=timezone.now() - timedelta(seconds=settings.OPERATION_RETENTION + 60))
    assert purge().deleted == 2
    assert 'operations{kind="payment.charge",status="succeeded"} 0.0' in gauge()
    assert 'operations{kind="payment.charge",status="failed"} 1.0' in gauge()


def test_the_operators_command_reads_the_processing_and_the_last_hours_alone(
    tenant: Tenant,
) -> None:
    add_processing(tenant)
    add_ended(tenant, ENDED)
    out = io.StringIO()

    statements, most = most_rows_read(lambda: call_command("operations", stdout=out))

    assert statements >= 4
    assert most <= 3, f"a statement of the command read {most} rows"
    # Ended two days ago: not in the last hour's tallies.
    assert "  payment.charge   processing          2" in out.getvalue()
    assert "succeeded" not in out.getvalue()
