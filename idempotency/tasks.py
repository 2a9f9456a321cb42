from celery import shared_task

from idempotency import services


@shared_task
def purge_expired_keys() -> int:
    return services.purge_expired_keys()
