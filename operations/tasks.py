"""Thin tasks: claim the operation, call its kind's handler, decide about retrying."""

from typing import Any

import structlog
from celery import Task, shared_task

from operations import registry, services

logger = structlog.get_logger(__name__)


@shared_task(bind=True, max_retries=None)
def run_operation(self: Task, *, operation_id: str, **kwargs: Any) -> None:
    """Perform one operation; safe to run any number of times, at once or in turn."""
    operation = services.claim_operation(operation_id)
    if operation is None:
        return  # finished already, or another worker holds it
    structlog.contextvars.bind_contextvars(operation_id=operation.id, kind=operation.kind)
    kind = registry.kind_of(operation)
    try:
        with services.lease_kept(operation):
            kind.handler(operation)
    except kind.retry.on as exc:
        delay = kind.retry.delay(self.request.retries)
        services.release_operation(operation, retry_in=delay)
        logger.info("operation will be retried", retry_in_s=delay, reason=str(exc))
        raise self.retry(countdown=delay, exc=exc) from None
