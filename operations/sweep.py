"""The sweep: messages presumed lost, found and published again, in every worker.

It runs in each Celery worker (:class:`OperationSweep`, a step of its
consumer) when the worker connects to the broker, and so again each time it
reconnects after an outage, and then every ``OPERATION_SWEEP_INTERVAL``
seconds. Running in the worker rather than as a beat task means the sweep
needs no message to start it: the moment a broker comes back, the worker
that reconnects publishes what was committed while it was away. And the
worker knows how far it has got through the queue (:class:`QueuePosition`),
which tells a lost message from one that is only waiting its turn
(:func:`sweep_lost_operations`).
"""

from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from typing import Any

import structlog
from celery import bootsteps, current_app, signals
from celery.worker.consumer import Consumer
from celery.worker.request import Request
from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import F, Q
from django.utils import timezone

from operations import registry
from operations.models import Operation
from operations.outbox import (
    PUBLISHED_AT_HEADER,
    QUEUE_HEADER,
    not_published,
    publish,
    stale_after,
)
from operations.registry import INTERNAL_ERROR

logger = structlog.get_logger(__name__)

# The most operations one sweep publishes, so that a sweep after a long
# outage stays short; the next sweep takes the rest.
SWEEP_BATCH = 500
_WORKER_LOST = "The worker performing the operation stopped during an attempt."


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
      :class:`QueuePosition`); the queue being first in,
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

    Every worker sweeps (:class:`OperationSweep`), so several sweeps may run at
    once: ``SKIP LOCKED`` gives each lost operation to one of them, which
    records the copy before it publishes it.
    """
    now = timezone.now()
    lost = Q(published_at__isnull=True) | Q(claimed_until__lt=now)
    for queue, kinds in registry.kinds_by_queue().items():
        passed = _emptied_before(queue, now, found_empty)
        if passed is None and (seen := (received_up_to or {}).get(queue)) is not None:
            passed = seen - stale_after()
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
            republish_at=now + stale_after(),
        )
    for sent, (operation_id, trace_id, _, kind) in enumerate(due):
        if not publish(operation_id, trace_id, queue=registry.queue_of(kind), published_at=now):
            # The broker is down: the rest are due again at the next sweep.
            not_published([pk for pk, _, _, _ in due[sent:]], due_at=now)
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
        return now - stale_after()
    before, found_empty[queue] = found_empty.get(queue), now
    if before is None:
        return None
    return min(now - stale_after(), before)


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


class QueuePosition:
    """How far one worker has got through each queue it consumes.

    ``received_up_to`` maps a queue to the newest publish time among the
    messages this worker has received from it. A queue is first in, first
    out: every message published to it before that one has left it too, to
    this worker or another, and a worker reserves no message beyond the ones it runs
    (late acknowledgement, ``CELERY_WORKER_PREFETCH_MULTIPLIER = 1``: kombu's
    window on Redis, the channel's ``basic.qos`` on RabbitMQ), so it has
    claimed its operation within moments. The one exception, a
    retry held for its countdown, is left alone by the sweep until the
    countdown is over (``Operation.republish_at``).
    """

    def __init__(self) -> None:
        self.received_up_to: dict[str, datetime] = {}
        # When this worker's last sweep found each queue empty, if it did
        # (:func:`sweep_lost_operations`).
        self.found_empty: dict[str, datetime] = {}

    def note(self, request: Request, **kwargs: Any) -> None:
        """The ``task_received`` signal, sent in the worker's consumer for each message."""
        stamp = request.request_dict.get(PUBLISHED_AT_HEADER)
        queue = request.request_dict.get(QUEUE_HEADER)
        if not isinstance(stamp, int | float) or not isinstance(queue, str):
            return  # not an operation's message (the purge), or one from before the headers
        published_at = datetime.fromtimestamp(stamp, tz=UTC)
        seen = self.received_up_to.get(queue)
        if seen is None or published_at > seen:
            self.received_up_to[queue] = published_at


class OperationSweep(bootsteps.StartStopStep):
    """A step of the worker's consumer: started on each connection, stopped on its loss."""

    def __init__(self, parent: Consumer, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.timer_ref: Any = None
        # Kept across reconnections: what the worker received before an
        # outage left the queue all the same.
        self.position = QueuePosition()

    def start(self, parent: Consumer) -> None:
        signals.task_received.connect(self.position.note, sender=parent, weak=False)
        self.sweep()
        self.timer_ref = parent.timer.call_repeatedly(settings.OPERATION_SWEEP_INTERVAL, self.sweep)

    def stop(self, parent: Consumer) -> None:
        signals.task_received.disconnect(self.position.note, sender=parent)
        if self.timer_ref is not None:
            self.timer_ref.cancel()
            self.timer_ref = None

    def sweep(self) -> None:
        # Between tasks, on the worker's own thread: drop a connection the
        # database closed (a restart) so this sweep opens a new one.
        close_old_connections()
        try:
            published = sweep_lost_operations(
                received_up_to=self.position.received_up_to,
                found_empty=self.position.found_empty,
            )
            if published:
                logger.info("the sweep published operations again", published=published)
        except Exception:
            # A database or broker outage: the next sweep tries again.
            logger.warning("the sweep failed; it runs again shortly", exc_info=True)
        finally:
            close_old_connections()
