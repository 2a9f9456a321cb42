"""Starting, attempting, ending and recovering operations.

The life of an operation (docs/SPECIFICATION.md §4 rules 9 and 10):

1. :func:`start_operation` records it with its command; its message is
   published once the command's transaction commits.
2. A worker that gets a message claims the operation for one attempt
   (:func:`claim_operation`) and keeps the lease while it works.
3. The attempt (:func:`attempt_operation`) runs the kind's handler, which
   ends the operation, or fails. A failed attempt is retried after a
   backoff, until ``OPERATION_MAX_ATTEMPTS`` attempts have been made; then
   the kind gives the operation up, which ends it.
4. The sweep (:func:`sweep_lost_operations`) publishes again an operation
   whose message is lost, and only then: never one that merely waits in
   the queue.
"""

import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

import structlog
from celery import current_app
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import Tenant
from api.plain_writes import PlainInsert
from observability.tracing import continued, current_trace_id, message_headers
from operations import ended as ended_count
from operations import metrics, registry
from operations.errors import NoSuchOperation, NotSettled, Postponed, StillUnanswered
from operations.models import Operation
from operations.registry import INTERNAL_ERROR, Failure, OperationKind

logger = structlog.get_logger(__name__)

RUN_OPERATION_TASK = "operations.tasks.run_operation"
# The message header that carries when the message was published (Unix
# seconds). The queue is first in, first out, so a worker that receives a
# message knows that every message published before it has left the queue
# (operations.worker.QueuePosition).
PUBLISHED_AT_HEADER = "published_at"
# The message header that names the queue it was sent to: each queue is first
# in, first out on its own, so a worker's position is kept per queue.
QUEUE_HEADER = "operation_queue"
# Publishing is tried briefly: a command must answer quickly even with the
# broker down, and the sweep publishes whatever did not get through.
_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2}
# The most operations one sweep publishes, so that a sweep after a long
# outage stays short; the next sweep takes the rest.
SWEEP_BATCH = 500
# The longest countdown a retry's message carries. A worker holds a message
# with a countdown, unacknowledged, until it is due (Redis hands it out again
# after its visibility timeout, 300 s; RabbitMQ closes the channel of a worker
# holding one past its consumer_timeout, 30 min by default): a retry due
# later (a webhook's backoff reaches hours) gets no message, and the sweep
# publishes it when due.
LONGEST_COUNTDOWN = 60.0
_WORKER_LOST = "The worker performing the operation stopped during an attempt."
_UNEXPECTED = "The operation failed on our side."


def _stale_after() -> timedelta:
    return timedelta(seconds=settings.OPERATION_STALE_AFTER)


# --- Starting and publishing ------------------------------------------------


# Every asynchronous command records its operation: as plain SQL written
# once (api/plain_writes.py says what that saves).
_OPERATIONS = PlainInsert(Operation)


def start_operation(*, tenant: Tenant, kind: str, result_id: str) -> Operation:
    """Record an operation and publish its message once the transaction commits.

    The row is the outbox: it commits with the command, so the work is never
    lost, even when the broker is down at that moment.
    """
    now = timezone.now()
    operation = Operation(
        tenant=tenant,
        kind=kind,
        result_id=result_id,
        trace_id=current_trace_id(),
        # Counted as published now, the time its message will carry; a
        # publish that fails says so (_not_published).
        published_at=now,
        publications=1,
        republish_at=now + _stale_after(),
    )
    _OPERATIONS.insert(operation)
    # The request's log line names the operation it started.
    structlog.contextvars.bind_contextvars(operation_id=operation.id)
    # robust: a broker failure after commit must not turn the committed
    # command into an error; the sweep will publish it.
    transaction.on_commit(
        partial(
            _publish,
            operation.id,
            operation.trace_id,
            queue=registry.queue_of(kind),
            published_at=now,
        ),
        robust=True,
    )
    return operation


def start_operations(*, tenant: Tenant, kind: str, result_ids: Sequence[str]) -> list[Operation]:
    """:func:`start_operation` for several results at once: one insert, however many."""
    now = timezone.now()
    trace_id = current_trace_id()
    operations = [
        Operation(
            tenant=tenant,
            kind=kind,
            result_id=result_id,
            trace_id=trace_id,
            published_at=now,
            publications=1,
            republish_at=now + _stale_after(),
        )
        for result_id in result_ids
    ]
    _OPERATIONS.insert(*operations)
    queue = registry.queue_of(kind)
    for operation in operations:
        transaction.on_commit(
            partial(_publish, operation.id, trace_id, queue=queue, published_at=now),
            robust=True,
        )
    return operations


def publish(
    operation_id: str,
    trace_id: str = "",
    *,
    queue: str,
    published_at: datetime | None = None,
    countdown: float | None = None,
) -> bool:
    """Send the operation's message to the broker; False if the broker is unreachable.

    Publishing twice is harmless: a worker must claim the operation first.
    The message goes to ``queue``, its kind's (``registry.queue_of``), and
    carries the trace of the request that started the
    operation (its id, and a W3C ``traceparent``), so the task's log lines
    and spans are in it, and ``published_at``, the time the operation's row
    records for it, and the queue's name (``QUEUE_HEADER``). A message with
    a ``countdown`` is run no sooner than that many seconds from now.
    """
    headers: dict[str, str | float] = {**message_headers(trace_id), QUEUE_HEADER: queue}
    if published_at is not None:
        headers[PUBLISHED_AT_HEADER] = published_at.timestamp()
    try:
        # The sweep and the retries publish outside that request: its trace
        # is resumed for the publication's span (a no-op within it).
        with continued(trace_id):
            # The Celery app of this process (config/celery.py), without
            # importing the configuration package.
            current_app.send_task(
                RUN_OPERATION_TASK,
                kwargs={"operation_id": operation_id},
                queue=queue,
                headers=headers,
                countdown=countdown,
                retry=True,
                retry_policy=_PUBLISH_RETRY_POLICY,
            )
    except Exception as exc:
        # One line, not a traceback: during an outage every command says it.
        logger.warning(
            "could not publish the operation; the sweep will",
            operation_id=operation_id,
            reason=str(exc),
        )
        return False
    return True


def _publish(
    operation_id: str,
    trace_id: str,
    *,
    queue: str,
    published_at: datetime,
    countdown: float | None = None,
) -> None:
    if not publish(
        operation_id, trace_id, queue=queue, published_at=published_at, countdown=countdown
    ):
        _not_published([operation_id], due_at=published_at + timedelta(seconds=countdown or 0))


def _not_published(operation_ids: Sequence[str], *, due_at: datetime) -> None:
    """Their messages never left: none of theirs is out, and the sweep sends one once due."""
    Operation.objects.filter(pk__in=operation_ids, status=Operation.Status.PROCESSING).update(
        published_at=None, publications=F("publications") - 1, republish_at=due_at
    )


# --- Attempts ---------------------------------------------------------------


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
            claimed_until=_lease_end(now),
            # The sweep's next look is when the lease would lapse.
            republish_at=_lease_end(now),
            attempts=F("attempts") + 1,
            updated_at=now,
        )
    )
    return Operation.objects.get(pk=operation_id) if claimed else None


@dataclass(frozen=True)
class _Retry:
    """An attempt that failed, to be followed by another after ``delay`` seconds.

    ``failure`` None: the attempt was postponed, and does not count; it is
    published at once if ``unless()`` says it need not wait after all.
    """

    failure: Failure | None
    delay: float
    unless: Callable[[], bool] | None = None


def attempt_operation(operation: Operation) -> None:
    """Make one attempt at a claimed operation.

    Every attempt counts against ``OPERATION_MAX_ATTEMPTS``, whatever ends
    it: an exception its kind's retry policy names (a provider's timeout),
    any other (a bug, an answer the code does not expect), or the loss of
    the worker making it. The handler runs on at most that many of them; a
    failed attempt before the last is retried after the policy's backoff,
    and after the last one the kind gives the operation up
    (:class:`operations.registry.OperationKind`), which ends it.
    """
    kind = registry.kind_of(operation)
    with lease_kept(operation):
        retry = _attempt(operation, kind)
    # The lease is given up once its renewals have stopped, and only then
    # is the next attempt's message sent.
    if retry is not None:
        _retry_later(operation, retry)


def _attempt(operation: Operation, kind: OperationKind) -> _Retry | None:
    budget = kind.retry.budget()
    if operation.attempts > budget:
        # Attempts that ended without a verdict spent the budget: the
        # worker of the last one was lost, or the operation could not be
        # ended yet (_give_up).
        return _give_up(operation, kind, _last_failure(operation))
    try:
        kind.handler(operation)
    except Postponed as postponed:
        return _Retry(None, postponed.delay, postponed.unless)
    except Exception as exc:
        failure = _failure_of(exc, kind, operation)
        if operation.attempts < budget:
            return _Retry(failure, kind.retry.delay(operation.attempts))
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


def _last_failure(operation: Operation) -> Failure:
    return Failure(operation.error_code or INTERNAL_ERROR, operation.error_message or _UNEXPECTED)


def _give_up(operation: Operation, kind: OperationKind, failure: Failure) -> _Retry | None:
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
        return _Retry(failure, kind.retry.max_delay)
    logger.info("operation ended after its last attempt", last_failure=failure.code)
    return None


def _retry_later(operation: Operation, retry: _Retry) -> None:
    """Give the claim up, record why the attempt failed, and send the next attempt's message.

    Should that message be lost, the sweep publishes the operation again
    once the retry is overdue. A retry due later than ``LONGEST_COUNTDOWN``
    gets no message now: the sweep publishes it when it is due. Nor does a
    postponed attempt, which gives its count back: the sweep publishes it
    when its delay is over, or whoever it waits for sooner
    (:func:`publish_waiting`).
    """
    now = timezone.now()
    due = now + timedelta(seconds=retry.delay)
    held = retry.failure is not None and retry.delay <= LONGEST_COUNTDOWN
    changes: dict[str, object] = {"claimed_until": None, "updated_at": now}
    if retry.failure is None:
        changes["attempts"] = F("attempts") - 1
    else:
        changes["error_code"] = retry.failure.code
        changes["error_message"] = retry.failure.message[:500]
    if held:
        changes.update(
            published_at=now,
            publications=F("publications") + 1,
            republish_at=due + _stale_after(),
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
    if retry.failure is not None:
        logger.info(
            "operation will be retried",
            retry_in_s=retry.delay,
            error=retry.failure.code,
            reason=retry.failure.message,
        )
    if held:
        _publish(
            operation.id,
            operation.trace_id,
            queue=registry.queue_of(operation.kind),
            published_at=now,
            countdown=retry.delay,
        )
    elif retry.unless is not None and retry.unless():
        publish_waiting(operation.id)


def publish_waiting(operation_id: str) -> bool:
    """Publish now an operation that waits without a message; False if it does not.

    For the work an operation waits on, once it is done: a webhook delivery
    postponed while another held its endpoint is sent as that one ends,
    not when its postponement is over. The row records the message before
    it is sent, and only if none was out, so a sweep at the same moment
    does not send a second.
    """
    now = timezone.now()
    recorded = Operation.objects.filter(
        pk=operation_id,
        status=Operation.Status.PROCESSING,
        published_at__isnull=True,
        claimed_until__isnull=True,
    ).update(
        published_at=now,
        publications=F("publications") + 1,
        republish_at=now + _stale_after(),
    )
    if recorded:
        trace_id, kind = Operation.objects.values_list("trace_id", "kind").get(pk=operation_id)
        _publish(operation_id, trace_id, queue=registry.queue_of(kind), published_at=now)
    return bool(recorded)


def fail_operation(operation: Operation, failure: Failure) -> None:
    """End the operation failed with ``failure``: the give-up of a kind that needs no other."""
    finish_operation(
        operation, succeeded=False, error_code=failure.code, error_message=failure.message
    )


# --- Settling by hand -------------------------------------------------------


def awaiting_answer(operation: Operation, kind: OperationKind) -> bool:
    """Whether the operation has used all its attempts and still could not be ended.

    Its kind's give-up needs an answer nobody gives (the provider's look-up):
    it is asked again every ``retry.max_delay``, without end, until the
    answer comes or an operator settles it (:func:`settle_operation`).
    """
    return (
        operation.status == Operation.Status.PROCESSING
        and operation.attempts >= kind.retry.budget()
    )


def settle_operation(operation_id: str, *, verdict: registry.Verdict | None = None) -> Operation:
    """End by hand an operation whose attempts have run out; the operation as it ended.

    Without a verdict its kind's give-up runs once more: the provider is
    asked what it holds, and the operation ends as it answers. With one
    (the operator learned the outcome elsewhere), it ends as the verdict
    says. The operation is claimed first, as by a worker, so that no
    worker's attempt runs at the same time; if it is not ended, the claim
    is given back and the workers go on asking. An operation that ended
    already is returned as it is, unless the verdict contradicts it.

    Only an operation out of attempts is settled: before that, its own
    attempts may still end it, and an operator's verdict would race them.

    :raises NoSuchOperation: no operation has that id.
    :raises NotSettled: it cannot be settled (the message says why).
    :raises StillUnanswered: the provider still cannot say; nothing changed.
    """
    operation = Operation.objects.filter(pk=operation_id).first()
    if operation is None:
        raise NoSuchOperation(f"No operation {operation_id}.")
    kind = registry.kind_of(operation)
    if operation.status != Operation.Status.PROCESSING:
        if verdict is not None and verdict.succeeded != (
            operation.status == Operation.Status.SUCCEEDED
        ):
            raise NotSettled(
                f"It ended {operation.status} already, on the provider's word; nothing changed."
            )
        return operation
    end = _ending(kind, verdict)
    budget = kind.retry.budget()
    if operation.attempts < budget:
        raise NotSettled(
            f"It has made {operation.attempts} of its {budget} attempts, and the workers"
            " are still making them: settle an operation once it has used all of them."
        )
    claimed = claim_operation(operation_id)
    if claimed is None:
        return _settled_meanwhile(operation_id, verdict)
    failure = _last_failure(claimed)
    try:
        with lease_kept(claimed):
            end(claimed, failure)
    except Exception as exc:
        # Given back as after any attempt that could not end it: the
        # workers ask again after the longest backoff.
        _retry_later(claimed, _Retry(failure, kind.retry.max_delay))
        if isinstance(exc, kind.retry.on):
            raise StillUnanswered(f"The provider still cannot say: {exc}") from exc
        raise
    settled = Operation.objects.get(pk=operation_id)
    logger.warning(
        "operation settled by an operator",
        operation_id=operation_id,
        kind=settled.kind,
        status=settled.status,
        verdict="asked the provider"
        if verdict is None
        else ("succeeded" if verdict.succeeded else "failed"),
        reference=verdict.reference if verdict is not None else "",
    )
    return settled


def _ending(kind: OperationKind, verdict: registry.Verdict | None) -> registry.GiveUp:
    """What ends an operation of ``kind``: its give-up, or its settle with ``verdict``."""
    if verdict is None:
        return kind.give_up or fail_operation
    settle = kind.settle
    if settle is None:
        raise NotSettled(f"Operations of kind {kind.name} end by themselves: no verdict is taken.")
    return lambda operation, failure: settle(operation, failure, verdict)


def _settled_meanwhile(operation_id: str, verdict: registry.Verdict | None) -> Operation:
    """The operation a worker held when the operator came: ended meanwhile, or still held."""
    operation = Operation.objects.get(pk=operation_id)
    if operation.status == Operation.Status.PROCESSING:
        raise NotSettled(
            "A worker is asking the provider about it right now; run the command again"
            f" after {operation.claimed_until:%H:%M:%S} UTC."
        )
    return settle_operation(operation_id, verdict=verdict)


def renew_lease(operation: Operation) -> bool:
    """Hold the claimed operation for another lease; False if it is no longer held."""
    lease_end = _lease_end(timezone.now())
    return bool(
        Operation.objects.filter(
            pk=operation.pk, status=Operation.Status.PROCESSING, claimed_until__isnull=False
        ).update(claimed_until=lease_end, republish_at=lease_end)
    )


def _lease_end(now: datetime) -> datetime:
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


def finish_operation(
    operation: Operation, *, succeeded: bool, error_code: str = "", error_message: str = ""
) -> bool:
    """Move the operation forward to its final status; False if it had one already.

    The status only moves forward: the update applies only to a processing
    row, so a late or repeated attempt cannot rewrite a finished operation.
    """
    status = Operation.Status.SUCCEEDED if succeeded else Operation.Status.FAILED
    with transaction.atomic():
        ended = bool(
            Operation.objects.filter(pk=operation.pk, status=Operation.Status.PROCESSING).update(
                status=status,
                error_code=error_code,
                error_message=error_message[:500],
                claimed_until=None,
                updated_at=timezone.now(),
            )
        )
        if ended:
            ended_count.count_end(operation.pk, operation.kind, status)
    if ended:
        transaction.on_commit(partial(metrics.count_ended, operation, status, error_code))
    return ended


# --- The sweep --------------------------------------------------------------


def sweep_lost_operations(
    *,
    received_up_to: Mapping[str, datetime] | None = None,
    found_empty: MutableMapping[str, datetime] | None = None,
) -> int:
    """Publish again the operations whose message is presumed lost; returns how many.

    An operation that no worker holds, past its ``republish_at``, has lost
    its message when:

    - its publish failed (``published_at`` is None);
    - the worker that claimed it stopped renewing its lease (the message
      was that worker's);
    - its queue has moved past it: the sweeping worker has received, from
      the queue of the operation's kind, a message published
      ``OPERATION_STALE_AFTER`` or more after the operation's own
      (``received_up_to``, by queue, from
      :class:`operations.worker.QueuePosition`); the queue being first in,
      first out, the operation's message left the queue before that one,
      and the worker that took it would have claimed the operation;
    - or its queue is empty, and its message was published
      ``OPERATION_STALE_AFTER`` ago or more. Given ``found_empty`` (the
      worker's, kept across its sweeps), only a queue the previous sweep
      found empty too, and only for a message published before that one
      looked: a message the broker delivered a moment before the queue
      emptied is in a worker that has not claimed its operation yet, and
      has claimed it by the next sweep.

    Each queue is judged on its own: a delivery waiting behind a slow
    receiver's in the webhooks queue is not lost because payments move.

    One that merely waits behind others in the queue is none of these,
    however long it waits: a backlog gets no copies, and drains at the
    workers' rate. The margin of ``OPERATION_STALE_AFTER`` covers clocks
    that differ between the machines that publish.

    Every worker sweeps (operations.worker), so several sweeps may run at
    once: ``SKIP LOCKED`` gives each lost operation to one of them, which
    records the copy before it publishes it.
    """
    now = timezone.now()
    lost = Q(published_at__isnull=True) | Q(claimed_until__lt=now)
    for queue, kinds in registry.kinds_by_queue().items():
        passed = _emptied_before(queue, now, found_empty)
        if passed is None and (seen := (received_up_to or {}).get(queue)) is not None:
            passed = seen - _stale_after()
        if passed is not None:
            lost |= Q(kind__in=kinds, published_at__lt=passed)
    with transaction.atomic():
        due = list(
            Operation.objects.select_for_update(skip_locked=True)
            .filter(status=Operation.Status.PROCESSING, republish_at__lte=now)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
            .filter(lost)
            .order_by("republish_at")
            .values_list("pk", "trace_id", "claimed_until", "kind")[:SWEEP_BATCH]
        )
        if abandoned := [pk for pk, _, claimed_until, _ in due if claimed_until is not None]:
            # The last attempt's failure, for the operator and for the error
            # the operation ends with if it was the last.
            Operation.objects.filter(pk__in=abandoned).update(
                error_code=INTERNAL_ERROR, error_message=_WORKER_LOST
            )
        Operation.objects.filter(pk__in=[pk for pk, _, _, _ in due]).update(
            claimed_until=None,
            published_at=now,
            publications=F("publications") + 1,
            republish_at=now + _stale_after(),
        )
    for sent, (operation_id, trace_id, _, kind) in enumerate(due):
        if not publish(operation_id, trace_id, queue=registry.queue_of(kind), published_at=now):
            # The broker is down: the rest are due again at the next sweep.
            _not_published([pk for pk, _, _, _ in due[sent:]], due_at=now)
            return sent
    return len(due)


def _emptied_before(
    queue: str, now: datetime, found_empty: MutableMapping[str, datetime] | None
) -> datetime | None:
    """The publish time before which an untaken message is lost, judged by ``queue`` being empty.

    None if the queue holds messages, or if the previous sweep did not find
    it empty too (``found_empty`` records when one last did): a message
    delivered just before the queue emptied is not claimed yet, on either
    broker (a backlog's last messages made a copy in one run of three); one
    published before the previous sweep found the queue empty had left it
    then, and is claimed by now or lost.
    """
    if not _queue_is_empty(queue):
        if found_empty is not None:
            found_empty.pop(queue, None)
        return None
    if found_empty is None:
        return now - _stale_after()
    before, found_empty[queue] = found_empty.get(queue), now
    if before is None:
        return None
    return min(now - _stale_after(), before)


def _queue_is_empty(queue: str) -> bool:
    """Whether no message waits in ``queue``; False when the broker cannot say."""
    app = current_app
    try:
        with app.connection_for_read() as conn, conn.channel() as channel:
            try:
                _, waiting, _ = channel.queue_declare(queue=queue, passive=True)
            except conn.channel_errors:
                # No such queue: nothing was ever sent to it, or (Redis) it
                # was emptied, and Redis drops an empty list.
                return True
    except Exception as exc:
        logger.warning("could not read the queue's length", reason=str(exc))
        return False
    return bool(waiting == 0)
