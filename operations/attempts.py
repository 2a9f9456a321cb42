"""A worker's claim, its lease, one attempt, and what follows one that did not end the operation.

A worker that gets a message claims the operation for one attempt
(:func:`claim_operation`) and keeps the lease while it works
(:func:`lease_kept`). The attempt (:func:`attempt_operation`) runs the
kind's handler, which ends the operation, or does not: it failed
(:class:`Retry`: it counts, and another follows after a backoff, until the
kind's budget is spent and the kind gives the operation up), or it was
postponed (:class:`Wait`: it does not count). Either way the claim is given
back (:func:`give_back`) and the next attempt's message sent.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import F, Q
from django.utils import timezone

from operations import registry
from operations.errors import Awaited, Postponed
from operations.models import Operation
from operations.outbox import publish_or_defer, stale_after
from operations.registry import INTERNAL_ERROR, Failure, OperationKind
from operations.services import fail_operation, publish_waiting

logger = structlog.get_logger(__name__)

# The longest countdown a retry's message carries. A worker holds a message
# with a countdown, unacknowledged, until it is due (Redis hands it out again
# after its visibility timeout, 300 s; RabbitMQ closes the channel of a worker
# holding one past its consumer_timeout, 30 min by default): a retry due
# later (a webhook's backoff reaches hours) gets no message, and the sweep
# publishes it when due.
LONGEST_COUNTDOWN = 60.0
_UNEXPECTED = "The operation failed on our side."


def claim_operation(operation_id: str) -> Operation | None:
    """Take the operation for one attempt, or None if it is finished or held.

    A compare-and-set: of any number of workers given the same operation
    (redelivery, the sweep, a retry), one wins until its lease lapses.
    """
    now = timezone.now()
    claimed = (
        Operation.objects.filter(pk=operation_id, status=Operation.Status.PROCESSING)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(
            claimed_until=lease_end(now),
            # The sweep's next look is when the lease would lapse.
            republish_at=lease_end(now),
            attempts=F("attempts") + 1,
            updated_at=now,
        )
    )
    return Operation.objects.get(pk=operation_id) if claimed else None


@dataclass(frozen=True)
class Retry:
    """The attempt failed: it counts, ``failure`` is kept, and another follows in ``delay`` s."""

    failure: Failure
    delay: float


@dataclass(frozen=True)
class Wait:
    """The attempt was postponed: it does not count, and the operation waits ``delay`` seconds.

    Sooner if what it waits for (``awaiting``) came free meanwhile.
    """

    delay: float
    awaiting: Awaited | None = None


def attempt_operation(operation: Operation) -> None:
    """Make one attempt at a claimed operation.

    Every attempt counts against its kind's budget (``OperationKind.budget``:
    ``OPERATION_MAX_ATTEMPTS`` unless the kind names its own), whatever ends
    it: an exception its kind's retry policy names (a provider's timeout),
    any other (a bug, an answer the code does not expect), or the loss of
    the worker making it. The handler runs on at most that many of them; a
    failed attempt before the last is retried after the policy's backoff,
    and after the last one the kind gives the operation up
    (:class:`operations.registry.OperationKind`), which ends it.
    """
    kind = registry.kind_of(operation)
    with lease_kept(operation):
        next_attempt = _attempt(operation, kind)
    # The lease is given up once its renewals have stopped, and only then
    # is the next attempt's message sent.
    if next_attempt is not None:
        give_back(operation, next_attempt)


def _attempt(operation: Operation, kind: OperationKind) -> Retry | Wait | None:
    budget = kind.retry.budget()
    if operation.attempts > budget:
        # Attempts that ended without a verdict spent the budget: the
        # worker of the last one was lost, or the operation could not be
        # ended yet (_give_up).
        return _give_up(operation, kind, last_failure(operation))
    try:
        kind.handler(operation)
    except Postponed as postponed:
        return Wait(postponed.delay, postponed.awaiting)
    except Exception as exc:
        failure = _failure_of(exc, kind, operation)
        if operation.attempts < budget:
            return Retry(failure, kind.retry.delay(operation.attempts))
        return _give_up(operation, kind, failure)
    return None


def _failure_of(exc: Exception, kind: OperationKind, operation: Operation) -> Failure:
    if isinstance(exc, kind.retry.on):
        return Failure(kind.retry.error, str(exc) or kind.retry.error)
    # A bug, or an answer nobody expected: its traceback, once per attempt,
    # in the trace of the request that started the operation. The client
    # is told only that it failed on our side.
    logger.error(
        "operation attempt failed unexpectedly",
        attempts=operation.attempts,
        budget=kind.retry.budget(),
        # The exception itself, not True: a handler that formats the record
        # later (in another thread, or a test's) still gets its traceback.
        exc_info=exc,
    )
    return Failure(INTERNAL_ERROR, _UNEXPECTED)


def last_failure(operation: Operation) -> Failure:
    return Failure(operation.error_code or INTERNAL_ERROR, operation.error_message or _UNEXPECTED)


def _give_up(operation: Operation, kind: OperationKind, failure: Failure) -> Retry | None:
    """End an operation whose attempts have run out; a retry if it cannot be ended yet."""
    try:
        (kind.give_up or fail_operation)(operation, failure)
    except Exception as exc:
        # Ending it needs an answer that is not there yet: the provider's,
        # about what it holds under the operation's key, or the database's.
        # Work the provider may have done is never called failed, so the
        # question is asked again, after the longest backoff.
        expected = isinstance(exc, kind.retry.on)
        (logger.warning if expected else logger.error)(
            "could not end the operation yet; asking again later",
            reason=str(exc),
            retry_in_s=kind.retry.max_delay,
            exc_info=None if expected else exc,
        )
        return Retry(failure, kind.retry.max_delay)
    logger.info("operation ended after its last attempt", last_failure=failure.code)
    return None


def give_back(operation: Operation, next_attempt: Retry | Wait) -> None:
    """Give the claim up, record why the attempt failed, and send the next attempt's message.

    Should that message be lost, the sweep publishes the operation again
    once the retry is overdue. A retry due later than ``LONGEST_COUNTDOWN``
    gets no message now: the sweep publishes it when it is due. Nor does a
    postponed attempt, which gives its count back: the sweep publishes it
    when its delay is over, or whoever it waits for sooner
    (operations.services.publish_waiting).
    """
    now = timezone.now()
    due = now + timedelta(seconds=next_attempt.delay)
    changes: dict[str, object] = {"claimed_until": None, "updated_at": now}
    if isinstance(next_attempt, Retry):
        changes["error_code"] = next_attempt.failure.code
        changes["error_message"] = next_attempt.failure.message[:500]
        held = next_attempt.delay <= LONGEST_COUNTDOWN
    else:
        changes["attempts"] = F("attempts") - 1
        held = False
    if held:
        changes.update(
            published_at=now,
            publications=F("publications") + 1,
            republish_at=due + stale_after(),
        )
    else:
        changes.update(published_at=None, republish_at=due)
    # Only while this attempt is the last one claimed: a worker that took
    # the operation over after this one's lease lapsed keeps it.
    released = Operation.objects.filter(
        pk=operation.pk, status=Operation.Status.PROCESSING, attempts=operation.attempts
    ).update(**changes)
    if not released:
        return
    if isinstance(next_attempt, Retry):
        logger.info(
            "operation will be retried",
            retry_in_s=next_attempt.delay,
            error=next_attempt.failure.code,
            reason=next_attempt.failure.message,
        )
    if held:
        publish_or_defer(
            operation.id,
            operation.trace_id,
            queue=registry.queue_of(operation.kind),
            published_at=now,
            countdown=next_attempt.delay,
        )
    elif (
        isinstance(next_attempt, Wait)
        and next_attempt.awaiting is not None
        and next_attempt.awaiting.came_free()
    ):
        publish_waiting(operation.id)


def renew_lease(operation: Operation) -> bool:
    """Hold the claimed operation for another lease; False if it is no longer held."""
    until = lease_end(timezone.now())
    return bool(
        Operation.objects.filter(
            pk=operation.pk, status=Operation.Status.PROCESSING, claimed_until__isnull=False
        ).update(claimed_until=until, republish_at=until)
    )


def lease_end(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.OPERATION_LEASE)


@contextmanager
def lease_kept(operation: Operation) -> Iterator[None]:
    """Renew the claimed operation's lease while the block runs.

    The lease is short so that the sweep hands a dead worker's operation to
    another within seconds; a live worker renews it every third of its
    length, so a slow provider call stays its own. The renewals run in a
    thread, each on a connection of its own that it closes: the block may
    take long, and a connection kept meanwhile could go stale.
    """
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(settings.OPERATION_LEASE / 3):
            try:
                if not renew_lease(operation):
                    return
            except DatabaseError:
                # The worker's own statements will fail too; if the database
                # is back before the lease lapses, the next renewal holds it.
                logger.warning(
                    "could not renew the lease", operation_id=operation.pk, exc_info=True
                )
            finally:
                connection.close()

    renewer = threading.Thread(target=renew, name=f"lease {operation.pk}", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
