"""What one principal can make the service keep is bounded (docs/SPECIFICATION.md §3 rule 12).

Every command stores its key, the field digests of its body and its answer
for ``IDEMPOTENCY_KEY_TTL``, validation refusals included (rule 5), and a
client chooses how many commands it sends and how large. Without a bound,
one principal sending 50 KB bodies of made-up members kept some 350 GB a
day and filled the database's disk for every tenant. So the bytes each
principal's keys hold are counted, and past ``IDEMPOTENCY_STORAGE_PER_PRINCIPAL``
a new key is refused before its command starts (``429 KeyQuotaExceeded``,
nothing stored). A retry of a stored key is still answered: it stores
nothing.

How the bytes are counted
=========================

Not with a ``sum()`` over the principal's keys at each command, which would
cost in proportion to what the principal keeps. A running total is kept in
:class:`~idempotency.models.StorageUsage`, in buckets of expiry time:

- A command that stores its answer adds its key's bytes to the bucket its
  key expires in (``expires_by``: the bucket's end), in the same
  transaction, with one upsert sent with the ``COMMIT`` (idempotency/statements.py).
- The claim reads the total of the principal's buckets that have not ended,
  in its own statement (a ``RETURNING`` subquery): the check costs no round
  trip, and a key that exists is replayed without it mattering.
- Nothing is subtracted when keys expire or are purged: a bucket is no
  longer counted once it has ended, and the purge deletes its rows. A key
  is therefore counted until its bucket ends, at most one bucket width
  (``IDEMPOTENCY_KEY_TTL`` / 24, an hour by default) after it expired: the
  total errs on the side of refusing, never of keeping more.

A bucket is split into ``SHARDS`` rows by the database connection that
writes it. An upsert locks its row until its transaction commits (the
upsert travels with the ``COMMIT``, so for as long as the commit takes): with
one row per bucket, every command of one principal would commit after the
previous one, one WAL flush at a time. With a row per connection's shard,
commands on different connections do not wait for each other; the check
then sums at most 25 buckets times ``SHARDS`` rows, one range of an index.

Why a new key is refused when its worst case would not fit
----------------------------------------------------------

The claim is checked before the command runs, when the key's answer is
not known yet: a new key is admitted only if the total, plus what its claim
holds, plus the largest answer a key may store (:data:`MAX_ANSWER_BYTES`),
fits. Commands of one principal running at once each see the total without
the others, so the total can exceed the bound by what those other commands
store: at most ``MAX_KEY_BYTES`` each, and there are at most as many as the
server runs at once (gunicorn's workers times threads).

What a key costs
----------------

Counted for each key (:func:`claim_bytes`, :func:`answer_bytes`): the bytes
of its values (key, method, path, fingerprint, field digests, answer body
and headers) plus ``ROW_OVERHEAD_BYTES`` for what PostgreSQL keeps besides.
The worst case, ``MAX_KEY_BYTES``, is 79.4 KiB: a 2 KiB path, 12 KiB of
digests and a 64 KiB answer. A refusal (4xx) stores at most 8 KiB of answer,
23.4 KiB in all; a validation error of a 100-line order wrong in every line
is counted 20.8 KB (12.9 KB on disk, which compresses it). A one-line order
is counted 1.4 KB, a little more than it takes on disk (measured by
``make bench``: docs/SCALING.md, *Where the time goes*). The count is above
the disk's for every shape measured: it errs on the side of refusing.
"""

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Sum

from accounts.models import Principal
from idempotency import policy
from idempotency.fingerprint import MAX_FIELD_DIGEST_BYTES, field_digests_bytes
from idempotency.models import IdempotencyKey, StorageUsage

# What PostgreSQL keeps for a key besides its values: two rows' headers and
# line pointers, the entries of the three indexes (the unique key, the
# expiry, the answer's primary key) and the varlena headers of its columns.
# Measured on PostgreSQL 15: 10,000 keys of `{}` bodies (a stored 400) took
# 1,043 B a key of tables, indexes and TOAST, of which 488 B were values.
ROW_OVERHEAD_BYTES = 560
# The largest answer a key stores, and the largest refusal (4xx): the
# protocol answers a command whose answer exceeds them 500 (idempotency/commands.py).
MAX_ANSWER_BYTES = 64 * 1024
MAX_REFUSAL_BYTES = 8 * 1024
# Content-Type, Location and Retry-After, as the answer's headers store them.
MAX_ANSWER_HEADER_BYTES = 512
_MAX_PATH_BYTES = IdempotencyKey._meta.get_field("request_path").max_length or 0
_MAX_METHOD_BYTES = IdempotencyKey._meta.get_field("request_method").max_length or 0
# The most one key can be counted for.
MAX_KEY_BYTES = (
    policy.MAX_KEY_LENGTH
    + _MAX_METHOD_BYTES
    + _MAX_PATH_BYTES
    + 64
    + MAX_FIELD_DIGEST_BYTES
    + MAX_ANSWER_BYTES
    + MAX_ANSWER_HEADER_BYTES
    + ROW_OVERHEAD_BYTES
)
# Rows per bucket (see the module docstring).
SHARDS = 8
# Buckets per retention window.
_BUCKETS = 24


def claim_bytes(*, key: str, method: str, path: str, field_digests: dict[str, str]) -> int:
    """What a claimed key holds before its answer: its values and the rows' overhead."""
    return (
        len(key)
        + len(method)
        + len(path.encode())
        + 64
        + field_digests_bytes(field_digests)
        + ROW_OVERHEAD_BYTES
    )


def answer_bytes(body: bytes, headers: dict[str, str]) -> int:
    """What a stored answer holds: its body and its headers."""
    return len(body) + sum(len(name) + len(value.encode()) + 6 for name, value in headers.items())


def admits(used: int, claim: int) -> bool:
    """Whether a new key that holds ``claim`` fits beside ``used``, whatever it answers."""
    bound = policy.storage_per_principal()
    return used + claim + MAX_ANSWER_BYTES + MAX_ANSWER_HEADER_BYTES <= bound


def bucket_width() -> timedelta:
    """A 24th of the retention window, and at least a second."""
    return timedelta(seconds=max(1, int(policy.key_ttl().total_seconds()) // _BUCKETS))


def bucket_end(expires_at: datetime) -> datetime:
    """The end of the bucket a key expiring at ``expires_at`` is counted in."""
    width = bucket_width().total_seconds()
    return datetime.fromtimestamp(math.ceil(expires_at.timestamp() / width) * width, tz=UTC)


def shard(db: BaseDatabaseWrapper = connection) -> int:
    """The row of its bucket a connection writes: one per PostgreSQL backend, mostly."""
    if db.vendor == "postgresql":
        return int(db.connection.info.backend_pid) % SHARDS
    return 0


@dataclass(frozen=True)
class Usage:
    """What a principal's keys hold, and when enough will have expired for another key."""

    used: int
    retry_after: int


def usage_of(principal: Principal, *, now: datetime, claim: int = 0) -> Usage:
    """The principal's counted bytes; ``retry_after``: seconds until a key of ``claim`` fits.

    Read when a key is refused, to say when to come back: the buckets end in
    order, and the first whose end frees enough room is the answer. A bound
    too small for any key (below ``MAX_KEY_BYTES``) never frees enough: the
    answer is then the last bucket's end.
    """
    buckets = list(
        StorageUsage.objects.filter(principal=principal, expires_by__gt=now)
        .values("expires_by")
        .annotate(total=Sum("bytes"))
        .order_by("expires_by")
        .values_list("expires_by", "total")
    )
    used = sum(total for _, total in buckets)
    left, wait = used, bucket_width()
    for expires_by, total in buckets:
        left -= total
        wait = expires_by - now
        if admits(left, claim):
            break
    return Usage(used=used, retry_after=max(1, math.ceil(wait.total_seconds())))


def forget_ended_buckets(*, now: datetime) -> int:
    """Delete the buckets that have ended (the purge's last step); returns how many."""
    deleted, _ = StorageUsage.objects.filter(expires_by__lte=now).delete()
    return deleted
