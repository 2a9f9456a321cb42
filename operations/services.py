"""Starting, claiming, finishing and recovering operations."""

import logging
from datetime import timedelta
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import Tenant
from observability.tracing import current_trace_id
from operations.models import Operation

logger = logging.getLogger(__name__)

RUN_OPERATION_TASK = "operations.tasks.run_operation"
# Publishing is tried briefly: a command must answer quickly even with the
# broker down, and the sweep publishes whatever did not get through.
_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2}


def start_operation(*, tenant: Tenant, kind: str, result_id: str) -> Operation:
    """Record an operation and publish its task once the transaction commits.

    The row is the outbox: it commits with the command, so the work is never
    lost, even when the broker is down at that moment.
    """
    operation = Operation.objects.create(
        tenant=tenant, kind=kind, result_id=result_id, trace_id=current_trace_id()
    )
    # robust: a broker failure after commit must not turn the committed
    # command into an error; the sweep will publish it.
    transaction.on_commit(partial(publish, operation.id, operation.trace_id), robust=True)
    return operation


def publish(operation_id: str, trace_id: str = "") -> bool:
    """Send the operation's task to the broker; False if the broker is unreachable.

    Publishing twice is harmless: a worker must claim the operation first.
    The trace id of the request that started the operation travels in the
    message headers, so the task's log lines carry it.
    """
    try:
        # The Celery app of this process (config/celery.py), without
        # importing the configuration package.
        current_app.send_task(
            RUN_OPERATION_TASK,
            kwargs={"operation_id": operation_id},
            headers={"trace_id": trace_id},
            retry=True,
            retry_policy=_PUBLISH_RETRY_POLICY,
        )
    except Exception:
        logger.warning(
            "Could not publish operation %s; the sweep will", operation_id, exc_info=True
        )
        return False
    return True


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
            claimed_until=now + timedelta(seconds=settings.OPERATION_LEASE),
            attempts=F("attempts") + 1,
            updated_at=now,
        )
    )
    return Operation.objects.get(pk=operation_id) if claimed else None


def release_operation(operation: Operation) -> None:
    """Give up the claim so a retry can take it."""
    Operation.objects.filter(pk=operation.pk, status=Operation.Status.PROCESSING).update(
        claimed_until=None, updated_at=timezone.now()
    )


def finish_operation(
    operation: Operation, *, succeeded: bool, error_code: str = "", error_message: str = ""
) -> bool:
    """Move the operation forward to its final status; False if it had one already.

    The status only moves forward: the update applies only to a processing
    row, so a late or repeated attempt cannot rewrite a finished operation.
    """
    status = Operation.Status.SUCCEEDED if succeeded else Operation.Status.FAILED
    return bool(
        Operation.objects.filter(pk=operation.pk, status=Operation.Status.PROCESSING).update(
            status=status,
            error_code=error_code,
            error_message=error_message,
            claimed_until=None,
            updated_at=timezone.now(),
        )
    )


def sweep_stale_operations() -> int:
    """Publish again the operations that made no progress for too long.

    Their message was lost (the broker was down at commit) or their worker
    died; returns how many were published.
    """
    now = timezone.now()
    stale = list(
        Operation.objects.filter(
            status=Operation.Status.PROCESSING,
            updated_at__lte=now - timedelta(seconds=settings.OPERATION_STALE_AFTER),
        )
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .order_by("updated_at")
        .values_list("pk", "trace_id")[:500]
    )
    published = 0
    for operation_id, trace_id in stale:
        # Touched first, so the next sweep gives this attempt time to run.
        Operation.objects.filter(pk=operation_id).update(updated_at=now)
        published += publish(operation_id, trace_id)
    return published
