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
  delete 10^6 keys at the same rate (9 s against 8 to 12 s with no
  requests running).
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
long as it runs. On 2 cores, while wrk created orders through the service
(16 connections), a purge of 10^6 expired keys beside 10^6 live ones in
batches of 2000 back to back took 13 to 18 s, and the create p99 during it
was 0.9 to 2.5 times the p99 just before (six runs: 0.9, 1.5, 1.6, 1.9,
2.2, 2.5; 1.3 to 2.1 in batches of 5000, 3.8 in batches of 10000). That
misses the goal of 2x one run in three, so the purge pauses between
batches (``IDEMPOTENCY_PURGE_PAUSE``, see :func:`purge_pause`): with 50 ms the
create p99 during the purge was 1.1 to 1.6 times the p99 before (six
runs: 1.1, 1.1, 1.1, 1.2, 1.4, 1.6), and the purge took 42 to 47 s.
(``python -m tests.bench.keys``, on a machine shared with other jobs, so
noisy figures.) The steady state is far lighter: an hourly run deletes an
hour's keys, a 24th of the table.

Why a B-tree on ``expires_at``, and neither BRIN nor partitions
--------------------------------------------------------------

Each batch asks for the oldest expired rows, ``ORDER BY expires_at LIMIT
n``: a B-tree answers by reading n entries. BRIN cannot order: with it,
every batch of 5000 scanned the whole table and sorted the expired rows
(1.6 s a batch at 10^6 expired keys, so some 5 minutes for the purge
against 8 to 12 s); it is smaller (72 kB against 77 MB) but made claims no
cheaper (an INSERT of 10^5 rows took 5.8 s with it, 5.1 s with the
B-tree: within noise, since ``expires_at`` grows with time and the B-tree
appends at its right end). Partitioning by day would make a purge a ``DROP
TABLE``, but a partitioned table's unique constraints must include the
partition key, so (tenant, principal, key) could no longer be unique
across partitions, and that constraint is what arbitrates every claim
(docs/SPECIFICATION.md §3 rule 4). And the table needs neither: at 10^6 keys a claim's
INSERT and a replay's SELECT cost what they cost at 10^3, timed at the
database (0.7 to 1.2 and 0.85 to 1.4 times over five runs). Through the
service, the 10^6 / 10^3 ratios of requests/s and of p99 ranged from 0.4
to 1.5 over seven runs, with 10^4 or 10^5 as often the slowest: the noise
of a shared machine, around a flat line.
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
# hardly depends on it (the work is per row: under load, 10^6 expired keys
# went in 13 to 24 s with batches of 1000 to 10000 alike, and once in 40 s
# at 1000), but how long one batch holds its rows' locks does, and that is
# how long a request re-claiming one of those very keys waits. It must stay
# far below IDEMPOTENCY_WAIT (2 s), the most a command waits for a lock
# before it answers 409. Under load the longest batch took 0.1 to 0.7 s at
# 2000 (fourteen runs), 0.4 and 0.7 s at 1000, 0.4 and 0.9 s at 5000 and
# 1.9 s at 10000.
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


# The pause between batches (IDEMPOTENCY_PURGE_PAUSE, 50 ms by default). A
# batch of PURGE_BATCH takes some 30 ms, so 50 ms leaves the database to
# commands for more than half of a long purge: on 2 cores that kept the
# create p99 during a purge of 10^6 keys within 1.6 times its p99 without
# (no pause: up to 2.5 times; 25 ms: 2.0 times once; 100 ms: 0.9 times, but
# a purge of 72 s instead of 46). The pause costs nothing in the steady
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
