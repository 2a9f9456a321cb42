import structlog
from celery import shared_task

from events import retention

logger = structlog.get_logger(__name__)


@shared_task
def purge_expired_events() -> int:
    """The hourly purge (CELERY_BEAT_SCHEDULE); returns how many events it deleted."""
    result = retention.purge()
    logger.info(
        "events_purged",
        deleted=result.deleted,
        batches=result.batches,
        endpoints_forgotten=result.endpoints,
        seconds=round(result.seconds, 3),
    )
    return result.deleted
