"""Retention of idempotency keys: the purge of keys past their TTL.

docs/SPECIFICATION.md §3 rule 10.

How a purge stays out of the way of commands
============================================

Commands touch a key row in three ways (idempotency/commands.py, its SQL in
idempotency/statements.py): a claim
INSERTs a new row (and the command's answer a row of its own beside it); a
replay reads one with a plain SELECT (no lock); a request that finds its
key expired deletes that row and its answer conditionally
(``expires_at <= now``) and claims the key afresh with an INSERT, a new row
with a new id and a new expiry, in its command's transaction.

The purge deletes in batches, each one statement in a transaction of its
own, the keys and their answers together::

    WITH gone AS (
        DELETE FROM idempotency_idempotencykey
        WHERE expires_at <= %(cutoff)s
          AND id IN (SELECT id FROM idempotency_idempotencykey
                     WHERE expires_at <= %(cutoff)s ORDER BY expires_at
                     LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
        RETURNING id
    ), answers AS (
        DELETE FROM idempotency_storedanswer WHERE key_id IN (SELECT id FROM gone)
    )
    SELECT count(*) FROM gone

- ``FOR UPDATE SKIP LOCKED``: a row that another transaction holds (a
  re-claim's conditional DELETE, uncommitted, or a ``SELECT ... FOR
  UPDATE``) is passed over, not waited for: the purge never queues behind
  a command, and it leaves alone the row a re-claim is replacing. A skipped
  row that is still there and still expired goes in the next run. Two
  purges at once (the hourly task and the command, or a task redelivered
  after the broker's visibility timeout) share the work the same way.
- ``expires_at <= cutoff`` again on the rows the DELETE takes: only a row
  expired at delete time goes, whatever happened between choosing and
  deleting it. A re-claimed key is a new row expiring a TTL ahead, so it
  never qualifies; the re-check keeps that true even for a re-claim that
  reused the old row.
- One statement, where the previous version selected ids and then deleted
  them: its DELETE waited for any of those rows a command held, until that
  command's transaction ended, and it cost two round trips a batch. Both
  delete keys at the same rate (docs/SCALING.md, "The purge").
- ``ORDER BY expires_at`` makes each batch read the oldest entries from the
  left end of the ``expires_at`` index. Without it the planner may scan the
  table from its start, reading past the live rows on every batch.
- ``cutoff`` is fixed when the run starts, on the application's clock, the
  one that wrote ``expires_at``: a run deletes what had expired when it
  began and then ends, however fast keys keep expiring.

What it costs commands. A claim of a new key and a replay never wait for
the purge: they touch no row it deletes (an INSERT of another key
conflicts with nothing; a SELECT reads past row locks). The one request
that can wait is one re-claiming an expired key at the very moment its row
is in the batch being deleted: it waits for that batch to commit (see
``PURGE_BATCH``), then finds the row gone and claims afresh.

The rest of the cost is the machine's: a purge keeps a core busy for as
long as it runs. Back to back, its batches took the commands' p99 past
twice its value in one run of three (larger batches, further), so the
purge pauses between batches (``IDEMPOTENCY_PURGE_PAUSE``, see
:func:`purge_pause`), which holds the commands' p99 and rate during a purge
of 10^6 keys near their values without it, for a purge some three times
as long. The steady state is far lighter: an hourly run deletes an hour's
keys, a 24th of the table. The figures, from ``python -m tests.bench.keys``:
docs/SCALING.md, "The purge".

Why a B-tree on ``expires_at``, and neither BRIN nor partitions
--------------------------------------------------------------

Each batch asks for the oldest expired rows, ``ORDER BY expires_at LIMIT
n``: a B-tree answers by reading n entries. BRIN cannot order: with it,
every batch scans the whole table and sorts the expired rows, so a purge
takes minutes rather than seconds; it is far smaller, but makes claims no
cheaper (``expires_at`` grows with time, and the B-tree appends at its
right end). Partitioning by day would make a purge a ``DROP
TABLE``, but a partitioned table's unique constraints must include the
partition key, so (tenant, principal, key) could no longer be unique
across partitions, and that constraint is what arbitrates every claim
(docs/SPECIFICATION.md §3 rule 4). And the table needs neither: at 10^6 keys a claim's
INSERT and a replay's SELECT cost what they cost at 10^3 (docs/SCALING.md,
"The key table at 10^3 to 10^6 rows", and "The purge" for the B-tree
against BRIN).
"""

import functools
from dataclasses import dataclass
from datetime import datetime
from time import perf_counter, sleep

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from idempotency import quota
from idempotency.models import IdempotencyKey, StoredAnswer

# Rows deleted per statement, and per transaction. The rate of a purge
# hardly depends on it (the work is per row), but how long one batch holds
# its rows' locks does, and that is how long a request re-claiming one of
# those very keys waits. It must stay far below IDEMPOTENCY_WAIT (2 s), the
# most a command waits for a lock before it answers 409: at 10000 the
# longest batch under load came near it, at 2000 it stays well below
# (docs/SCALING.md, "The purge").
PURGE_BATCH = 2000


@dataclass(frozen=True)
class PurgeResult:
    """What one purge run did."""

    deleted: int
    batches: int
    seconds: float
    # The longest batch: how long it held its rows' locks, which bounds how
    # long a re-claim of one of those keys waited.
    longest_batch_seconds: float

    @property
    def rate(self) -> float:
        """Keys deleted per second."""
        return self.deleted / self.seconds if self.seconds > 0 else 0.0


def purge_expired_keys(*, batch_size: int = PURGE_BATCH, pause: float | None = None) -> int:
    """Delete the keys that had expired when the purge began; returns how many.

    See the module docstring for why this never blocks claims and never
    deletes a key being replayed or re-claimed, and ``purge`` for the
    arguments.
    """
    return purge(batch_size=batch_size, pause=pause).deleted


# The pause between batches (IDEMPOTENCY_PURGE_PAUSE, 50 ms by default),
# longer than a batch of PURGE_BATCH takes, so that the database is left to
# commands for more than half of a long purge (the pauses tried, and what
# each did to the commands' p99: docs/SCALING.md, "The purge"). The pause
# costs nothing in the steady
# state, where an hourly run is a few batches, and makes a backlog (a beat
# that did not run for a day) take three times as long to clear.
def purge_pause() -> float:
    """Seconds between two batches: ``IDEMPOTENCY_PURGE_PAUSE``."""
    return float(settings.IDEMPOTENCY_PURGE_PAUSE)


def purge(*, batch_size: int = PURGE_BATCH, pause: float | None = None) -> PurgeResult:
    """``purge_expired_keys``, also telling how many batches it took and how long.

    ``pause``: seconds to wait between batches (default ``purge_pause()``).

    :raises ValueError: ``batch_size`` is not positive or ``pause`` is negative.
    """
    if pause is None:
        pause = purge_pause()
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if pause < 0:
        raise ValueError("pause must not be negative")
    started = perf_counter()
    cutoff = timezone.now()
    deleted = batches = 0
    longest = 0.0
    while True:
        batch_started = perf_counter()
        count = _delete_batch(cutoff=cutoff, size=batch_size)
        longest = max(longest, perf_counter() - batch_started)
        batches += 1
        deleted += count
        # Fewer than asked means no unlocked expired row was left: SKIP
        # LOCKED passes over locked rows and keeps scanning up to the limit.
        if count < batch_size:
            # The storage totals' buckets that have ended count nothing any
            # more (idempotency/quota.py): a few rows per principal a run.
            quota.forget_ended_buckets(now=cutoff)
            return PurgeResult(
                deleted=deleted,
                batches=batches,
                seconds=perf_counter() - started,
                longest_batch_seconds=longest,
            )
        if pause:
            # Not to synchronise anything: to leave the database's CPU and
            # disk to commands for a while (purge_pause).
            sleep(pause)


def _delete_batch(*, cutoff: datetime, size: int) -> int:
    """One batch: at most ``size`` expired, unlocked keys and their answers; how many keys."""
    if connection.vendor == "postgresql":
        # FOR UPDATE needs a transaction; one per batch keeps its locks short.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_purge_batch_sql(), {"cutoff": cutoff, "size": size})
            (count,) = cursor.fetchone()
        return int(count)
    # Elsewhere (SQLite, the embedded default: one writer at a time, no row
    # locks to skip), Django's CASCADE deletes each batch's answers first.
    with transaction.atomic():
        expired = IdempotencyKey.objects.filter(expires_at__lte=cutoff)
        oldest = expired.order_by("expires_at").values("pk")[:size]
        _, deleted = expired.filter(pk__in=oldest).delete()
    return deleted.get(IdempotencyKey._meta.label, 0)


@functools.cache
def _purge_batch_sql() -> str:
    """The module docstring's statement, with the tables' and columns' own names."""
    quote = connection.ops.quote_name
    keys, key_id = quote(IdempotencyKey._meta.db_table), quote(IdempotencyKey._meta.pk.column)
    expires_at = quote(IdempotencyKey._meta.get_field("expires_at").column)
    answers = quote(StoredAnswer._meta.db_table)
    answer_key = quote(StoredAnswer._meta.pk.column)
    return (
        f"WITH gone AS (DELETE FROM {keys} WHERE {expires_at} <= %(cutoff)s"  # noqa: S608
        f" AND {key_id} IN (SELECT {key_id} FROM {keys} WHERE {expires_at} <= %(cutoff)s"
        f" ORDER BY {expires_at} LIMIT %(size)s FOR UPDATE SKIP LOCKED)"
        f" RETURNING {key_id}),"
        f" answers AS (DELETE FROM {answers} WHERE {answer_key} IN (SELECT {key_id} FROM gone))"
        " SELECT count(*) FROM gone"
    )
