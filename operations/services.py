"""What other apps call of operations: start one, find a live one, wake a waiting one, end one.

This module is the app's face; the engine behind it is split by concern,
and no other app imports it (import-linter says so):

- operations.outbox: publishing an operation's message, and recording when
  it could not be;
- operations.attempts: a worker's claim, its lease, one attempt, and the
  retry or the give-up after a failed one;
- operations.settling: an operator ending one whose attempts have run out;
- operations.sweep: finding lost messages and publishing them again.

The life of an operation (docs/SPECIFICATION.md §4 rules 9 and 10):

1. :func:`start_operation` records it with its command; its message is
   published once the command's transaction commits.
2. A worker that gets a message claims the operation for one attempt and
   keeps the lease while it works (operations.attempts).
3. The attempt runs the kind's handler, which ends the operation
   (:func:`finish_operation`), or fails. A failed attempt is retried after a
   backoff, until ``OPERATION_MAX_ATTEMPTS`` attempts have been made; then
   the kind gives the operation up, which ends it.
4. The sweep publishes again an operation whose message is lost, and only
   then: never one that merely waits in the queue (operations.sweep).
"""

from collections.abc import Sequence
from functools import partial
from typing import Any

import structlog
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from accounts.models import Tenant
from api.plain_writes import PlainInsert
from observability.tracing import current_trace_id
from operations import ended as ended_count
from operations import metrics, registry
from operations.models import Operation
from operations.outbox import publish_or_defer, stale_after
from operations.registry import Failure

# Every asynchronous command records its operation: as plain SQL written
# once (api/plain_writes.py says what that saves).
_OPERATIONS = PlainInsert(Operation)


def start_operation(*, tenant: Tenant, kind: str, result_id: str) -> Operation:
    """Record an operation and publish its message once the transaction commits.

    The row is the outbox: it commits with the command, so the work is never
    lost, even when the broker is down at that moment.
    """
    registry.require(kind)
    now = timezone.now()
    operation = Operation(
        tenant=tenant,
        kind=kind,
        result_id=result_id,
        trace_id=current_trace_id(),
        # Counted as published now, the time its message will carry; a
        # publish that fails says so (operations.outbox.not_published).
        published_at=now,
        publications=1,
        republish_at=now + stale_after(),
    )
    _OPERATIONS.insert(operation)
    # The request's log line names the operation it started.
    structlog.contextvars.bind_contextvars(operation_id=operation.id)
    # robust: a broker failure after commit must not turn the committed
    # command into an error; the sweep will publish it.
    transaction.on_commit(
        partial(
            publish_or_defer,
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
    registry.require(kind)
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
            republish_at=now + stale_after(),
        )
        for result_id in result_ids
    ]
    _OPERATIONS.insert(*operations)
    queue = registry.queue_of(kind)
    for operation in operations:
        transaction.on_commit(
            partial(publish_or_defer, operation.id, trace_id, queue=queue, published_at=now),
            robust=True,
        )
    return operations


def under_way(*, tenant_id: int, kind: str, result_id: str) -> Operation | None:
    """The operation of ``kind`` still processing for ``result_id``, if there is one.

    At most one is (a partial unique index): a command that must not start
    a second (a refund asked for twice) looks here first, under its
    resource's lock.
    """
    return Operation.objects.filter(
        tenant=tenant_id, kind=kind, result_id=result_id, status=Operation.Status.PROCESSING
    ).first()


def oldest_waiting(
    *, tenant_id: int, kind: str, result_ids: "QuerySet[Any, Any]"
) -> Operation | None:
    """Of the operations of ``kind`` for ``result_ids`` (a subquery of ids), the one waiting
    without a message longest.

    Such an operation was postponed: no worker holds it and none of its
    messages is out, so it runs when the sweep finds it due, or sooner if
    whoever it waits for wakes it (:func:`publish_waiting`).
    """
    return (
        Operation.objects.filter(
            tenant=tenant_id,
            kind=kind,
            status=Operation.Status.PROCESSING,
            published_at__isnull=True,
            claimed_until__isnull=True,
            result_id__in=result_ids,
        )
        .order_by("republish_at")
        .first()
    )


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
        republish_at=now + stale_after(),
    )
    if recorded:
        trace_id, kind = Operation.objects.values_list("trace_id", "kind").get(pk=operation_id)
        publish_or_defer(operation_id, trace_id, queue=registry.queue_of(kind), published_at=now)
    return bool(recorded)


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


def fail_operation(operation: Operation, failure: Failure) -> None:
    """End the operation failed with ``failure``: the give-up of a kind that needs no other."""
    finish_operation(
        operation, succeeded=False, error_code=failure.code, error_message=failure.message
    )
