"""When to retry, and how long to wait first: :class:`RetryPolicy`, a pure function of the outcome.

Retrying is safe here for one reason only: every request the client sends
may be repeated without repeating its effect. Commands carry an
``Idempotency-Key`` that stays the same on every retry, so the service
executes a command once and answers every copy with the stored result
(docs/SPECIFICATION.md §3); reads (``GET``) change nothing. A client that sent commands
without a key, or with a new key per attempt, must not use this policy.

RFC 9110 §9.2.2 says a client SHOULD NOT automatically retry a request
with a non-idempotent method such as ``POST`` unless it knows the
request's semantics are idempotent, and SHOULD NOT automatically retry a
failed automatic retry. Retries within the ``deadline`` (60 s) are safe
here all the same, for the reasons the RFC asks for: the
``Idempotency-Key`` makes the service treat the ``POST`` as idempotent,
so a retry repeats no effect; every attempt carries the same key and the
same body bytes, so it is the same request and never a new command; and
the retries are bounded by a deadline (and by ``max_attempts`` if one is
set), spread by jittered backoff, and wait at least the ``Retry-After``
the service asks for, so they do not pile load onto a service that is
failing.

**The default budget is time, not a count.** What a client must outlast
is an outage of some length: a failover of PostgreSQL answers ``503``
from the primary's death until the standby is promoted, 30 s at most as
the goal (measured in docs/RELIABILITY.md, "A failover of PostgreSQL"). A count runs out at the
speed of the failures: eight attempts against a refused connection,
backing off from 0.1 s, are spent in about six seconds on average (the
mean of full jitter), long before the new primary serves. The default
``deadline`` is twice the failover's
goal, and no default count is set. The deadline is also cut, call by
call, to what is left of the key's retention since its first use, as the
service publishes it (:mod:`order_service_client.policy`): a retry after
the service may have forgotten the key would execute the command again
(docs/SPECIFICATION.md §3 rule 15).

What is worth retrying (:meth:`RetryPolicy.retryable`):

- **No answer at all**: the connection was refused, reset or dropped, or an
  answer did not arrive in time (``httpx.TransportError`` except the
  client's own mistakes, :func:`transient`). The command may or may not
  have run; the retry, under the same key, finds out without running it
  twice.
- **5xx**: the server or something in front of it failed. A ``503
  ServiceUnavailable`` says nothing was committed. A first ``500`` is
  retried as well, though the service stores a ``500`` as the command's
  final outcome: the retry, under the same key, replays that stored
  answer and executes nothing, so it costs one request and is harmless,
  while a ``500`` from a proxy in front of the service is not the
  command's answer at all, and the retry is what learns that answer. The
  service's replay carries ``Idempotent-Replayed: true`` and is final:
  retrying it again would only replay the same bytes. ``501`` and ``505``
  say the server will never do this, and are final.
- **409 IdempotencyKeyInProgress**: another request with this key is still
  running; its answer will be replayed to us once it is done.
- **429**: a rate limit; it says when to come back.

Everything else is an answer, and final: ``2xx``, and every other ``4xx``
(validation, authentication, conflicts such as ``409 OrderAlreadyExists``,
``412 PreconditionFailed``, business refusals). Repeating one gets the same
answer, because the request, not the moment, is at fault: a stale
``If-Match`` stays stale, and the service replays the stored refusal anyway.

How long to wait (:meth:`RetryPolicy.next_delay`):

- With ``Retry-After``, at least that long: the server knows when it can
  answer, and an earlier retry only adds load to a server that is
  struggling already. It is not capped by ``max_delay``, which bounds our
  own guesses; a ``Retry-After`` that reaches past the deadline ends the
  retries instead. A little jitter (the backoff below) is added on top, so
  that the many clients an outage told ``Retry-After: 2`` at the same
  moment do not all come back in the same instant.
- Otherwise capped exponential backoff with full jitter: a uniform draw
  from ``[0, min(max_delay, base_delay * 2 ** (attempt - 1))]``. The
  randomness spreads out clients that failed together; the doubling backs
  off from a service that stays down; the cap keeps a recovered service
  from waiting on us.
- Never past the deadline: if the next attempt could not start before
  ``deadline`` seconds have passed since the first one, stop. Retries are
  also bounded by ``max_attempts``, when one is given.

The policy reads no clock and never sleeps: the client passes the elapsed
time and does the sleeping, so the policy is tested without either.
"""

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

__all__ = ["FAILOVER_GOAL_S", "RetryEvent", "RetryPolicy", "parse_retry_after", "transient"]

# Seconds from the death of the database's primary until the service
# answers commands again: docs/RELIABILITY.md's goal for a failover (which
# measures it there). The default deadline is twice as long.
FAILOVER_GOAL_S = 30.0

# 5xx answers that describe the server for good, not for now.
_PERMANENT_SERVER_STATUSES = frozenset({501, 505})

# The 409 code that means "not yet" rather than "no".
_IN_PROGRESS = "IdempotencyKeyInProgress"

# 2 ** 60 times any sane base delay exceeds any cap; a larger exponent would
# only risk a float overflow.
_MAX_EXPONENT = 60


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a call is retried. Immutable, and safe to share.

    :param max_attempts: attempts per call, the first included (1 = never
        retry); ``None`` (the default): as many as the deadline allows.
    :param deadline: seconds from the first attempt after which no attempt
        starts; the default outlasts a failover of the service's database
        with a margin of 2 (:data:`FAILOVER_GOAL_S`).
    :param base_delay: the first backoff's upper bound, in seconds.
    :param max_delay: the largest backoff the policy chooses itself (not
        the largest wait: ``Retry-After`` may ask for more).
    """

    max_attempts: int | None = None
    deadline: float = 2 * FAILOVER_GOAL_S
    base_delay: float = 0.1
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1, or None")
        if self.deadline <= 0:
            raise ValueError("deadline must be positive")
        if not 0 <= self.base_delay <= self.max_delay:
            raise ValueError("delays must satisfy 0 <= base_delay <= max_delay")

    def retryable(
        self, *, status: int | None, error_code: str | None, replayed: bool = False
    ) -> bool:
        """Whether this outcome may change if the same request is sent again.

        :param status: the answer's status, or ``None`` when no answer came
            (a transient transport error, see :func:`transient`).
        :param error_code: the problem body's ``error``, if any.
        :param replayed: the answer carried ``Idempotent-Replayed: true``.
        """
        if status is None:
            return True
        if status >= 500:
            return not replayed and status not in _PERMANENT_SERVER_STATUSES
        return status == 429 or (status == 409 and error_code == _IN_PROGRESS)

    def backoff_cap(self, attempt: int) -> float:
        """The upper bound of the jittered backoff after attempt number ``attempt`` (1-based)."""
        exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
        return min(self.max_delay, self.base_delay * 2.0**exponent)

    def next_delay(
        self,
        attempt: int,
        *,
        status: int | None,
        error_code: str | None,
        retry_after: float | None,
        elapsed: float,
        replayed: bool = False,
        rng: random.Random | None = None,
    ) -> float | None:
        """Seconds to wait before the next attempt, or ``None``: do not retry.

        :param attempt: how many attempts were made, the one that just
            ended included (1 after the first).
        :param status: see :meth:`retryable`.
        :param error_code: see :meth:`retryable`.
        :param retry_after: the answer's ``Retry-After`` in seconds, if any
            (:func:`parse_retry_after`).
        :param elapsed: seconds since the first attempt started.
        :param replayed: see :meth:`retryable`.
        :param rng: the source of jitter; the ``random`` module's when ``None``.
        """
        if not self.retryable(status=status, error_code=error_code, replayed=replayed):
            return None
        if self.max_attempts is not None and attempt >= self.max_attempts:
            return None
        # Jitter needs no secrecy, only spread.
        draw = (rng or random).uniform(0.0, self.backoff_cap(attempt))
        delay = draw if retry_after is None else max(retry_after, 0.0) + draw
        if elapsed + delay >= self.deadline:
            return None
        return delay


@dataclass(frozen=True)
class RetryEvent:
    """One retry about to happen, as told to the client's ``on_retry`` callback.

    :param attempt: the attempt that just failed, 1-based.
    :param delay: the seconds the client sleeps before the next one.
    :param reason: why: the transport error's class name (``ConnectError``,
        ``ReadTimeout``, ``RemoteProtocolError``), the problem's code for a
        ``409`` (``IdempotencyKeyInProgress``), or the status (``"503"``).
    :param method: the request's method.
    :param path: the request's path (and query).
    :param key: the ``Idempotency-Key`` every attempt carries; ``None`` for reads.
    """

    attempt: int
    delay: float
    reason: str
    method: str
    path: str
    key: str | None


def transient(error: httpx.TransportError) -> bool:
    """Whether a transport error may pass: anything but a request this client cannot send.

    Timeouts, network errors (refused, reset, unreachable), a connection the
    server closed mid-answer (``RemoteProtocolError``) and proxy failures
    are transient. ``LocalProtocolError`` and ``UnsupportedProtocol`` are
    the client's own mistakes; sending the same request again would fail
    the same way.
    """
    return not isinstance(error, httpx.LocalProtocolError | httpx.UnsupportedProtocol)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds from now: delay-seconds or an HTTP-date (RFC 9110 §10.2.3).

    The service sends whole seconds; a proxy in front of it may send a date.
    Anything unreadable is ``None``, as if the header were absent; a date in
    the past is 0.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        # RFC 9110 dates are GMT; email.utils marks "-0000" dates as naive.
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)
