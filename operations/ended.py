"""The count of ended operations by kind and status, kept as they end and as they are purged.

See :class:`operations.models.EndedCount` for why it is kept rather than
counted. Both writers run inside the transaction that changes the
operations' table, so the count and the table never disagree.
"""

import zlib
from collections import Counter
from collections.abc import Iterable

from django.db import connection
from django.db.models import Sum

from operations.models import EndedCount

# Rows each (kind, status) is spread over: a handful of workers ending
# operations at once rarely meet on one.
SHARDS = 8

_ADD = """
    INSERT INTO operations_endedcount (kind, status, shard, count)
    VALUES (%s, %s, %s, %s)
    ON CONFLICT (kind, status, shard)
    DO UPDATE SET count = operations_endedcount.count + EXCLUDED.count
"""


def count_end(operation_id: str, kind: str, status: str) -> None:
    """One more ended operation, on a shard chosen by its id."""
    shard = zlib.crc32(operation_id.encode()) % SHARDS
    with connection.cursor() as cursor:
        cursor.execute(_ADD, [kind, status, shard, 1])


def count_purged(purged: Iterable[tuple[str, str]]) -> None:
    """Take the purged operations, as (kind, status) pairs, off the count."""
    by_pair = Counter(purged)
    if not by_pair:
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            _ADD, [[kind, status, 0, -count] for (kind, status), count in by_pair.items()]
        )


def ended_counts() -> dict[tuple[str, str], int]:
    """Ended operations the table holds, by (kind, status)."""
    return {
        (row["kind"], row["status"]): int(row["total"])
        for row in EndedCount.objects.values("kind", "status").annotate(total=Sum("count"))
    }
