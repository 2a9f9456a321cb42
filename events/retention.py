"""Keeping events for ``EVENT_RETENTION``, and no longer.

The feed promises at least 30 days (contract §4): a consumer that was
down for a month can still catch up with ``after``. Past that the events,
and their deliveries, are deleted in batches, each its own short
transaction, oldest first. An event with a delivery still pending is kept
until the delivery ends: a delivery's attempts span hours, never a month,
unless a deployment sets them so.

A disabled webhook endpoint is kept as long as an event it was sent, and
then forgotten: once it has been disabled for ``EVENT_RETENTION`` and no
delivery of it is left, it is deleted (its id is then ``404``). Kept for
ever, disabled endpoints were the one thing a client could grow without
bound: the per-tenant limit counts the enabled ones, and creating and
deleting an endpoint in a loop left a row each time.
"""

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from events.models import Delivery, Event, WebhookEndpoint

PURGE_BATCH = 1000


def retention() -> timedelta:
    return timedelta(seconds=settings.EVENT_RETENTION)


@dataclass(frozen=True)
class Purged:
    deleted: int
    batches: int
    seconds: float
    # Disabled endpoints forgotten (the module's docstring).
    endpoints: int = 0


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
    endpoints = _forget_disabled_endpoints(cutoff, batch_size)
    return Purged(
        deleted=deleted,
        batches=batches,
        seconds=time.monotonic() - started,
        endpoints=endpoints,
    )


def _forget_disabled_endpoints(cutoff: datetime, batch_size: int) -> int:
    """Delete the endpoints disabled before ``cutoff`` that no delivery names; how many."""
    forgotten = WebhookEndpoint.objects.filter(
        status=WebhookEndpoint.Status.DISABLED, updated_at__lt=cutoff
    ).exclude(Exists(Delivery.objects.filter(endpoint=OuterRef("pk"))))
    deleted = 0
    while batch := list(forgotten.order_by("updated_at").values_list("pk", flat=True)[:batch_size]):
        count, _ = forgotten.filter(pk__in=batch).delete()
        deleted += count
    return deleted
