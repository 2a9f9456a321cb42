"""Keeping ended operations for ``OPERATION_RETENTION``, and no longer.

docs/SPECIFICATION.md §4 rule 8. An operation that has ended
(``succeeded`` or ``failed``) is read only by a client polling it, by a
replay of the ``202`` that started it (idempotency keys live
``IDEMPOTENCY_KEY_TTL``, which the settings keep at most this long) and by
an operator. Past the retention it is deleted, and its id answers ``404``.
A ``processing`` operation is never deleted, however old: it is the
outbox of work not done yet.

Nothing else goes with it. No table refers to an operation: a webhook
delivery is what a ``webhook.deliver`` operation works on (its
``result_id``), not the other way round, and it goes with its event
(events/retention.py); an endpoint's ``busy_by`` names an operation only
while its attempt is under way, that is while it is processing.

How a run is bounded
--------------------

- The cutoff is fixed when the run starts: it deletes what had passed the
  retention then, and ends, however fast operations keep ending.
- It deletes in batches of ``PURGE_BATCH``, each its own short transaction,
  the longest ended first (the ``operation_ended`` partial index, which
  holds ended rows only: a batch never reads past processing ones).
- At most ``MAX_BATCHES`` batches a run. A backlog larger than that (beat
  stopped for weeks, or a retention just shortened) is cleared over the
  following runs, each of bounded length, rather than by one run that
  holds a worker for an hour.

No ``SKIP LOCKED`` here, unlike the purge of keys: every write of an
operation is a compare-and-set on ``status='processing'``, so no command
or task ever locks an ended row, and a batch never waits for one.
"""

import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from operations import ended
from operations.models import Operation

# Rows per batch, and per transaction: a batch takes milliseconds, and the
# rows are ones nobody writes, so its size matters to no one waiting.
PURGE_BATCH = 1000
# Batches per run: 10^6 operations, some ten times what the service ends in
# an hour at its measured top rate (170 to 230 a second, docs/SCALING.md),
# so the hourly run keeps up with any steady state.
MAX_BATCHES = 1000

ENDED = (Operation.Status.SUCCEEDED, Operation.Status.FAILED)
_DELETE = """
    DELETE FROM operations_operation
    WHERE id = ANY(%s) AND status = ANY(%s) AND updated_at < %s
    RETURNING kind, status
"""


def retention() -> timedelta:
    """How long an ended operation is kept: ``OPERATION_RETENTION``."""
    return timedelta(seconds=settings.OPERATION_RETENTION)


@dataclass(frozen=True)
class Purged:
    """What one run did."""

    deleted: int
    batches: int
    seconds: float
    # False when the run stopped at its batch limit with more to delete:
    # the next run goes on.
    finished: bool


def purge(*, batch_size: int = PURGE_BATCH, max_batches: int = MAX_BATCHES) -> Purged:
    """Delete the operations ended longer than the retention ago, oldest first.

    :raises ValueError: ``batch_size`` or ``max_batches`` is not positive.
    """
    if batch_size < 1 or max_batches < 1:
        raise ValueError("batch_size and max_batches must be at least 1")
    started = time.monotonic()
    cutoff = timezone.now() - retention()
    expired = Operation.objects.filter(status__in=ENDED, updated_at__lt=cutoff)
    deleted = batches = 0
    while batches < max_batches:
        with transaction.atomic():
            batch = list(expired.order_by("updated_at").values_list("pk", flat=True)[:batch_size])
            # Filtered again: only a row ended before the cutoff goes,
            # whatever happened between choosing it and deleting it. What
            # was deleted, here and not by a purge beside this one, comes
            # off the gauge's count in the same transaction.
            with connection.cursor() as cursor:
                cursor.execute(_DELETE, [batch, list(ENDED), cutoff])
                gone = cursor.fetchall()
            ended.count_purged(gone)
        count = len(gone)
        deleted += count
        batches += 1
        if len(batch) < batch_size:
            return Purged(deleted, batches, time.monotonic() - started, finished=True)
    return Purged(deleted, batches, time.monotonic() - started, finished=False)
