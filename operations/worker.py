"""The sweep, run by every Celery worker beside its tasks.

It runs when the worker connects to the broker, and so again each time it
reconnects after an outage, and then every ``OPERATION_SWEEP_INTERVAL``
seconds. Running in the worker rather than as a beat task means the sweep
needs no message to start it: the moment a broker comes back, the worker
that reconnects publishes what was committed while it was away.
"""

import logging
from typing import Any

from celery import bootsteps
from celery.worker.consumer import Consumer
from django.conf import settings
from django.db import close_old_connections

from operations.services import sweep_stale_operations

logger = logging.getLogger(__name__)


class OperationSweep(bootsteps.StartStopStep):
    """A step of the worker's consumer: started on each connection, stopped on its loss."""

    def __init__(self, parent: Consumer, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.timer_ref: Any = None

    def start(self, parent: Consumer) -> None:
        self.sweep()
        self.timer_ref = parent.timer.call_repeatedly(settings.OPERATION_SWEEP_INTERVAL, self.sweep)

    def stop(self, parent: Consumer) -> None:
        if self.timer_ref is not None:
            self.timer_ref.cancel()
            self.timer_ref = None

    def sweep(self) -> None:
        # Between tasks, on the worker's own thread: drop a connection the
        # database closed (a restart) so this sweep opens a new one.
        close_old_connections()
        try:
            if published := sweep_stale_operations():
                logger.info("The sweep published %d operations again", published)
        except Exception:
            # A database or broker outage: the next sweep tries again.
            logger.warning("The sweep failed; it runs again shortly", exc_info=True)
        finally:
            close_old_connections()
