"""Starting, claiming, finishing and recovering operations."""

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, connection, transaction
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
# The most operations one sweep publishes, so that a sweep after a long
# outage stays short; the next sweep takes the rest.
SWEEP_BATCH = 500


def start_operation(*, tenant: Tenant, kind: str, result_id: str) -> Operation:
    """Record an operation and publish its task once the transaction commits.

    The row is the outbox: it commits with the command, so the work is never
    lost, even when the broker is down at that moment.
    """
    operation = Operation.objects.create(
        tenant=tenant,
        kind=kind,
        result_id=result_id,
        trace_id=current_trace_id(),
        republish_at=_after_publish(),
    )
    # robust: a broker failure after commit must not turn the committed
    # command into an error; the sweep will publish it.
    transaction.on_commit(
        partial(_publish_or_leave_to_sweep, operation.id, operation.trace_id), robust=True
    )
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
    except Exception as exc:
        # One line, not a traceback: during an outage every command says it.
        logger.warning("Could not publish operation %s (%s); the sweep will", operation_id, exc)
        return False
    return True


def _publish_or_leave_to_sweep(operation_id: str, trace_id: str) -> None:
    if not publish(operation_id, trace_id):
        # Due now, not after OPERATION_STALE_AFTER: the first sweep once the
        # broker is back publishes it.
        _due_now([operation_id])


def _after_publish() -> datetime:
    """When a message published now is presumed lost if no worker has taken it."""
    return timezone.now() + timedelta(seconds=settings.OPERATION_STALE_AFTER)


def _due_now(operation_ids: list[str]) -> None:
    Operation.objects.filter(pk__in=operation_ids, status=Operation.Status.PROCESSING).update(
        republish_at=timezone.now()
    )


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
            attempts=F("attempts") + 1,
            updated_at=now,
        )
    )
    return Operation.objects.get(pk=operation_id) if claimed else None


def renew_lease(operation: Operation) -> bool:
    """Hold the claimed operation for another lease; False if it is no longer held."""
    return bool(
        Operation.objects.filter(
            pk=operation.pk, status=Operation.Status.PROCESSING, claimed_until__isnull=False
        ).update(claimed_until=_lease_end(timezone.now()))
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
                logger.warning("Could not renew the lease of %s", operation.pk, exc_info=True)
            finally:
                connection.close()

    renewer = threading.Thread(target=renew, name=f"lease {operation.pk}", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()


def release_operation(operation: Operation, *, retry_in: float) -> None:
    """Give up the claim for a retry that a message will bring in ``retry_in`` seconds.

    Should that message be lost too, the sweep publishes the operation once
    it is overdue.
    """
    now = timezone.now()
    Operation.objects.filter(pk=operation.pk, status=Operation.Status.PROCESSING).update(
        claimed_until=None,
        republish_at=now + timedelta(seconds=retry_in + settings.OPERATION_STALE_AFTER),
        updated_at=now,
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
    """Publish again the operations whose message is presumed lost; returns how many.

    An operation is due when its ``republish_at`` has passed and no worker
    holds its lease: its publish failed (the broker was down), its message
    was lost with a worker that died holding it, or its worker died
    mid-attempt. Every worker sweeps (operations.worker), so several sweeps
    may run at once: ``SKIP LOCKED`` gives each due operation to one of
    them, which moves it ahead before it publishes.
    """
    now = timezone.now()
    with transaction.atomic():
        due = list(
            Operation.objects.select_for_update(skip_locked=True)
            .filter(status=Operation.Status.PROCESSING, republish_at__lte=now)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
            .order_by("republish_at")
            .values_list("pk", "trace_id")[:SWEEP_BATCH]
        )
        Operation.objects.filter(pk__in=[pk for pk, _ in due]).update(republish_at=_after_publish())
    for published, (operation_id, trace_id) in enumerate(due):
        if not publish(operation_id, trace_id):
            # The broker is down: the rest are due again at the next sweep.
            _due_now([pk for pk, _ in due[published:]])
            return published
    return len(due)
