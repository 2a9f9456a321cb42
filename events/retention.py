"""Keeping events for ``EVENT_RETENTION``, and no longer.

The feed promises at least 30 days (contract §4): a consumer that was
down for a month can still catch up with ``after``. Past that the events,
and their deliveries, are deleted in batches, each its own short
transaction, oldest first. An event with a delivery still pending is kept
until the delivery ends: a delivery's attempts span hours, never a month,
unless a deployment sets them so.
"""

import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from events.models import Delivery, Event

PURGE_BATCH = 1000


def retention() -> timedelta:
    return timedelta(seconds=settings.EVENT_RETENTION)


@dataclass(frozen=True)
class Purged:
    deleted: int
    batches: int
    seconds: float


def purge(*, batch_size: int = PURGE_BATCH) -> Purged:
    """Delete the events older than the retention, with their deliveries."""
    started = time.monotonic()
    cutoff = timezone.now() - retention()
    pending = Delivery.objects.filter(event=OuterRef("pk"), status=Delivery.Status.PENDING)
    expired = Event.objects.filter(created_at__lt=cutoff).exclude(Exists(pending))
    deleted = batches = 0
    while True:
        with transaction.atomic():
            batch = list(expired.order_by("created_at").values_list("seq", flat=True)[:batch_size])
            if not batch:
                break
            Delivery.objects.filter(event__in=batch).delete()
            Event.objects.filter(seq__in=batch).delete()
        deleted += len(batch)
        batches += 1
    return Purged(deleted=deleted, batches=batches, seconds=time.monotonic() - started)
