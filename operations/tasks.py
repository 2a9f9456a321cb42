"""Thin tasks: claim the operation, then make one attempt at it; and the purge."""

from typing import Any

import structlog
from celery import shared_task

from operations import attempts, retention

logger = structlog.get_logger(__name__)


@shared_task
def run_operation(*, operation_id: str, **kwargs: Any) -> None:
    """Make one attempt at an operation; safe to run any number of times, at once or in turn.

    Retries are not Celery's: the attempt itself sends the next one's
    message, so that the operation's row counts every attempt and every
    message (operations.attempts.attempt_operation).
    """
    operation = attempts.claim_operation(operation_id)
    if operation is None:
        return  # finished already, or another worker holds it
    structlog.contextvars.bind_contextvars(
        operation_id=operation.id, kind=operation.kind, attempt=operation.attempts
    )
    attempts.attempt_operation(operation)


@shared_task
def purge_ended_operations() -> int:
    """The hourly purge (CELERY_BEAT_SCHEDULE); returns how many operations it deleted."""
    result = retention.purge()
    logger.info(
        "operations_purged",
        deleted=result.deleted,
        batches=result.batches,
        seconds=round(result.seconds, 3),
        finished=result.finished,
    )
    return result.deleted
