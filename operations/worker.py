"""The sweep, run by every Celery worker beside its tasks.

It runs when the worker connects to the broker, and so again each time it
reconnects after an outage, and then every ``OPERATION_SWEEP_INTERVAL``
seconds. Running in the worker rather than as a beat task means the sweep
needs no message to start it: the moment a broker comes back, the worker
that reconnects publishes what was committed while it was away. And the
worker knows how far it has got through the queue (:class:`QueuePosition`),
which tells a lost message from one that is only waiting its turn.
"""

import logging
from datetime import UTC, datetime
from typing import Any

from celery import bootsteps, signals
from celery.worker.consumer import Consumer
from celery.worker.request import Request
from django.conf import settings
from django.db import close_old_connections

from operations.services import PUBLISHED_AT_HEADER, QUEUE_HEADER, sweep_lost_operations

logger = logging.getLogger(__name__)


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
        # (operations.services.sweep_lost_operations).
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
                logger.info("The sweep published %d operations again", published)
        except Exception:
            # A database or broker outage: the next sweep tries again.
            logger.warning("The sweep failed; it runs again shortly", exc_info=True)
        finally:
            close_old_connections()
