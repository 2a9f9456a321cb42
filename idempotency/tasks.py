import structlog
from celery import shared_task

from idempotency import retention

logger = structlog.get_logger(__name__)


@shared_task
def purge_expired_keys() -> int:
    """The hourly purge (CELERY_BEAT_SCHEDULE); returns how many keys it deleted."""
    result = retention.purge()
    logger.info(
        "idempotency_keys_purged",
        deleted=result.deleted,
        batches=result.batches,
        seconds=round(result.seconds, 3),
        longest_batch_seconds=round(result.longest_batch_seconds, 3),
    )
    return result.deleted
