"""Thin tasks: claim the operation, call one handler, decide about retrying."""

from typing import Any

import structlog
from celery import Task, shared_task
from django.conf import settings

from operations import services
from operations.errors import TransientFailure
from operations.registry import handler_for

logger = structlog.get_logger(__name__)

# Retries back off exponentially up to this delay (seconds).
MAX_BACKOFF = 60.0


@shared_task(bind=True, max_retries=None)
def run_operation(self: Task, *, operation_id: str, **kwargs: Any) -> None:
    """Perform one operation; safe to run any number of times, at once or in turn."""
    operation = services.claim_operation(operation_id)
    if operation is None:
        return  # finished already, or another worker holds it
    structlog.contextvars.bind_contextvars(operation_id=operation.id, kind=operation.kind)
    try:
        handler_for(operation.kind)(operation)
    except TransientFailure as exc:
        services.release_operation(operation)
        delay = min(settings.PAYMENT_RETRY_BACKOFF * 2**self.request.retries, MAX_BACKOFF)
        logger.info("operation will be retried", retry_in_s=delay, reason=str(exc))
        raise self.retry(countdown=delay, exc=exc) from None


@shared_task
def sweep_stale_operations() -> int:
    return services.sweep_stale_operations()
