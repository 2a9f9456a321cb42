"""Publishing an operation's message, and recording when it could not be.

The operation's row is the outbox: it commits with its command, and its
message is sent after (:func:`publish`). The row records each message it
sends (``published_at``, ``publications``) and when the sweep should look
at it again (``republish_at``), so that a message that never left, or was
lost, is sent again (operations.sweep), and one that waits in the queue is
not.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

import structlog
from celery import current_app
from django.conf import settings
from django.db.models import F

from observability.tracing import continued, message_headers
from operations.models import Operation

logger = structlog.get_logger(__name__)

RUN_OPERATION_TASK = "operations.tasks.run_operation"
# The message header that carries when the message was published (Unix
# seconds). The queue is first in, first out, so a worker that receives a
# message knows that every message published before it has left the queue
# (operations.sweep.QueuePosition).
PUBLISHED_AT_HEADER = "published_at"
# The message header that names the queue it was sent to: each queue is first
# in, first out on its own, so a worker's position is kept per queue.
QUEUE_HEADER = "operation_queue"
# Publishing is tried briefly: a command must answer quickly even with the
# broker down, and the sweep publishes whatever did not get through.
_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2}


def stale_after() -> timedelta:
    """How long after its message was sent an operation may be looked at by the sweep."""
    return timedelta(seconds=settings.OPERATION_STALE_AFTER)


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


def publish_or_defer(
    operation_id: str,
    trace_id: str,
    *,
    queue: str,
    published_at: datetime,
    countdown: float | None = None,
) -> None:
    """Send the message; if the broker cannot take it, leave it to the sweep once due."""
    if not publish(
        operation_id, trace_id, queue=queue, published_at=published_at, countdown=countdown
    ):
        not_published([operation_id], due_at=published_at + timedelta(seconds=countdown or 0))


def not_published(operation_ids: Sequence[str], *, due_at: datetime) -> None:
    """Their messages never left: none of theirs is out, and the sweep sends one once due."""
    Operation.objects.filter(pk__in=operation_ids, status=Operation.Status.PROCESSING).update(
        published_at=None, publications=F("publications") - 1, republish_at=due_at
    )
