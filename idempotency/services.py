from django.utils import timezone

from idempotency.models import IdempotencyKey

# Rows deleted per statement, so a large purge never holds long locks.
PURGE_BATCH = 5000


def purge_expired_keys() -> int:
    """Delete keys past their retention; returns how many were deleted."""
    deleted = 0
    while True:
        batch = list(
            IdempotencyKey.objects.filter(expires_at__lte=timezone.now()).values_list(
                "pk", flat=True
            )[:PURGE_BATCH]
        )
        if not batch:
            return deleted
        count, _ = IdempotencyKey.objects.filter(pk__in=batch).delete()
        deleted += count
