"""When a client polling a processing operation should ask again: its ``Retry-After``."""

import math
from datetime import datetime

from django.utils import timezone

# Retry-After is 1 s for an operation's first QUICK_SECONDS: a charge or a
# refund usually ends within a second or two of being accepted, and a client
# asking every second then learns of the end at once.
QUICK_SECONDS = 10
# After that a tenth of the age: the operation waits on something slow (a
# provider timing out and retried with backoff, a lost worker's lease of
# 10 s, a backlog, a provider that cannot answer its look-up for hours), and
# a poll a second would cost a request a second per client for nothing.
# Waiting a tenth of the age already waited delays learning of the end by
# at most about 10 % of that age.
AGE_DIVISOR = 10
# ...and never more than this: how late a client may learn that even a very
# old operation has ended. It is also the bound a client gives its polling.
MAX_RETRY_AFTER_SECONDS = 30
# The rule in words, as the specification and the schema state it
# (tests/operations/test_polling.py holds them to it).
RULE = (
    f"1 s for its first {QUICK_SECONDS} seconds, then its age divided by {AGE_DIVISOR} "
    f"in whole seconds (rounded down), never more than {MAX_RETRY_AFTER_SECONDS} s"
)


def retry_after_seconds(age_seconds: float) -> int:
    """``Retry-After`` of a processing operation created ``age_seconds`` ago, in whole seconds.

    1 for the first 10 seconds, then the age divided by 10 and rounded down
    (15 s old: 1; 59 s old: 5; 120 s old: 12), never more than 30. A
    negative age (a server whose clock is behind the one that created the
    operation) counts as 0.
    """
    if age_seconds < QUICK_SECONDS:
        return 1
    return min(MAX_RETRY_AFTER_SECONDS, max(1, math.floor(age_seconds / AGE_DIVISOR)))


def retry_after_of(created_at: datetime) -> str:
    """The ``Retry-After`` header, now, of a processing operation created at ``created_at``."""
    return str(retry_after_seconds((timezone.now() - created_at).total_seconds()))
