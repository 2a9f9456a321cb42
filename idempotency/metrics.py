"""What the idempotency layer did with each command, and how its table fares, for ``/metrics``."""

from collections.abc import Iterator

from django.db import connection
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from idempotency.models import IdempotencyKey
from observability.metrics import DURATION_BUCKETS

# ``command`` is the route as the URLconf spells it (``POST
# /v1/orders/{order_id}/cancel``, commands.command_name), not the schema's and
# the published policy's camelCased ``{orderId}``: dashboards and the alert
# rules in deploy/prometheus/ match the label as it is.
IDEMPOTENCY_OUTCOMES = Counter(
    "idempotency_outcomes_total",
    "Commands by what the idempotency layer did with them.",
    ["command", "outcome"],
)
COMMAND_DURATION = Histogram(
    "command_duration_seconds",
    "Time to answer a command, replays and refusals included.",
    ["command"],
    buckets=DURATION_BUCKETS,
)


class KeysCollector(Collector):
    """The key table's size and the purge's lag, read at scrape time in one query.

    Neither counts rows: the size is the planner's estimate, kept by
    autovacuum's ANALYZE (``pg_class.reltuples``, -1 until the table's
    first), and the lag is the oldest expiry on the ``expires_at`` index. A
    scrape costs the same with a thousand keys or a hundred million.
    """

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        table = IdempotencyKey._meta.db_table
        quoted = connection.ops.quote_name(table)
        with connection.cursor() as cursor:
            # The table name is ours.
            sql = (
                "SELECT (SELECT reltuples FROM pg_class WHERE oid = %s::regclass),"  # noqa: S608
                " (SELECT extract(epoch FROM now() - min(expires_at))"
                f"  FROM {quoted} WHERE expires_at < now())"
            )
            cursor.execute(sql, [table])
            estimated, lag = cursor.fetchone()
        yield GaugeMetricFamily(
            "idempotency_keys_estimated_rows",
            "The key table's rows, as the planner estimates them (-1: not analysed yet).",
            value=float(estimated),
        )
        yield GaugeMetricFamily(
            "idempotency_purge_lag_seconds",
            "Seconds since the oldest key still stored expired (0: none is past its expiry)."
            " The purge runs hourly.",
            value=float(lag or 0),
        )
