"""The idempotency policy's numbers, and the words that state them.

The numbers are settings (``IDEMPOTENCY_KEY_TTL``, ``IDEMPOTENCY_WAIT``,
``IDEMPOTENCY_LOCK_TIMEOUT``: config/settings.py says why each default is
what it is). This module is the one place that reads them for the rest of
the code and phrases them for people, so that the protocol
(idempotency/commands.py and its statements), the ``Retry-After`` of a key
in progress, the OpenAPI descriptions (idempotency/schema.py) and the
README (checked by a test) cannot
drift apart when a default or a deployment's value changes.
"""

import math
from datetime import timedelta

from django.conf import settings

from api.errors import size_text

# The longest key (visible ASCII characters). The header's grammar (RFC 9651)
# sets no limit; 255 bounds each stored key and its index entry and leaves
# room for any UUID, ULID or prefixed token a client may use.
MAX_KEY_LENGTH = 255


def key_ttl() -> timedelta:
    """How long a completed key is kept and replayed; after it, the key is new."""
    return timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)


def wait_seconds() -> float:
    """How long a duplicate waits for the request that holds its key."""
    return float(settings.IDEMPOTENCY_WAIT)


def lock_timeout_seconds() -> float:
    """How long one statement of a command, or one pause between two, may last."""
    return float(settings.IDEMPOTENCY_LOCK_TIMEOUT)


def in_progress_retry_after() -> str:
    """``Retry-After`` of ``409 IdempotencyKeyInProgress``: the wait, in whole seconds.

    By then the first request has usually finished, and the retry gets its
    replay; never less than a second (the header counts whole seconds).
    """
    return str(max(1, math.ceil(wait_seconds())))


def seconds_text(seconds: float) -> str:
    """``2 s``, ``0.5 s``: a duration as the docs spell it."""
    return f"{seconds:g} s"


def ttl_text() -> str:
    """``86400 s, 24 h``: the retention, in seconds and in the unit people think in."""
    total = int(key_ttl().total_seconds())
    if total % 3600 == 0:
        return f"{total} s, {total // 3600} h"
    return f"{total} s"


def wait_phrase() -> str:
    """How the docs name the in-flight wait: ``IDEMPOTENCY_WAIT`` (2 s)."""
    return f"`IDEMPOTENCY_WAIT` ({seconds_text(wait_seconds())})"


def retention_phrase() -> str:
    """How the docs name the retention: ``IDEMPOTENCY_KEY_TTL`` (86400 s, 24 h)."""
    return f"`IDEMPOTENCY_KEY_TTL` ({ttl_text()})"


def storage_per_principal() -> int:
    """The most one principal's stored keys may hold, in bytes (rule 12)."""
    return int(settings.IDEMPOTENCY_STORAGE_PER_PRINCIPAL)


def storage_phrase() -> str:
    """How the docs name the bound: ``IDEMPOTENCY_STORAGE_PER_PRINCIPAL`` (512 MiB)."""
    return f"`IDEMPOTENCY_STORAGE_PER_PRINCIPAL` ({size_text(storage_per_principal())})"


def lock_timeout_phrase() -> str:
    """How the docs name the lock timeout: ``IDEMPOTENCY_LOCK_TIMEOUT`` (30 s)."""
    return f"`IDEMPOTENCY_LOCK_TIMEOUT` ({seconds_text(lock_timeout_seconds())})"
