"""A tenant's delivery attempts in flight: at most ``WEBHOOK_TENANT_CONCURRENCY`` at once.

An attempt to a receiver that answers slowly holds a delivery worker's slot
for up to ``WEBHOOK_TIMEOUT``; one attempt per endpoint (events.delivery)
still lets a tenant with more endpoints than the workers have slots hold
them all, and another tenant's delivery would wait for several attempts in
turn. So each tenant also has a bound, held by the database across every
worker as the endpoint's hold is: ``WEBHOOK_TENANT_CONCURRENCY`` rows
(:class:`events.models.DeliverySlot`), each held for one attempt. With
more slots on the deliveries workers than the bound (docs/DEPLOYING.md,
"Workers"), a tenant's slow receivers always leave a slot free for the
others, and another tenant's delivery waits at most for one attempt.

An attempt over the bound is postponed, uncounted, without a message
(operations.errors.Postponed); events.delivery sends it on as one of the
tenant's attempts ends.

What it costs an attempt (counted by tests/events/test_tenant_slots.py): three
statements more than the endpoint's hold alone, 14 instead of 11 for a
delivered attempt: one ``UPDATE`` to take a slot (one of the tenant's few
rows, by the unique index), one to let it go, and, as it ends, one look
for the tenant's oldest held delivery (the ``delivery_held`` partial
index, which holds the held ones only: empty while the tenant is under its
bound). An attempt over the bound, and each of the tenant's first few
attempts ever, also read the tenant's slot numbers, and the latter add the
missing one.
"""

from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, Q, Value, When
from django.utils import timezone

from events.models import DeliverySlot


def bound() -> int:
    return int(settings.WEBHOOK_TENANT_CONCURRENCY)


def take(*, tenant_id: int, operation_id: str, until: datetime) -> bool:
    """Hold one of the tenant's slots for ``operation_id`` until ``until``; False if none is free.

    A free slot, one whose hold lapsed, or the operation's own (an earlier
    attempt's, whose worker died in it) is taken, the operation's own
    first. One statement on PostgreSQL: the candidate is locked ``SKIP
    LOCKED`` and updated at once, so two attempts never take one slot, and
    neither waits for the other nor misses a free slot the other did not
    take.
    """
    now = timezone.now()
    if connection.vendor == "postgresql":
        taken = _take_skip_locked(tenant_id, operation_id, until, now)
    else:
        # SQLite (make run): its writers take turns, so the UPDATE's own
        # check of the candidate is exact.
        free = Q(busy_until__isnull=True) | Q(busy_until__lt=now) | Q(busy_by=operation_id)
        candidate = (
            DeliverySlot.objects.filter(tenant_id=tenant_id, number__lt=bound())
            .filter(free)
            .order_by(Case(When(busy_by=operation_id, then=Value(0)), default=Value(1)), "number")
            .values("pk")[:1]
        )
        taken = (
            DeliverySlot.objects.filter(pk__in=candidate)
            .filter(free)
            .update(busy_until=until, busy_by=operation_id)
        )
    return bool(taken) or _add(tenant_id=tenant_id, operation_id=operation_id, until=until)


# Django's select_for_update() needs a transaction of its own (two round
# trips more), so the statement is written out.
_TAKE = """
UPDATE events_deliveryslot SET busy_until = %(until)s, busy_by = %(operation)s
WHERE id = (
    SELECT id FROM events_deliveryslot
    WHERE tenant_id = %(tenant)s AND number < %(bound)s
      AND (busy_until IS NULL OR busy_until < %(now)s OR busy_by = %(operation)s)
    ORDER BY busy_by = %(operation)s DESC, number
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
"""


def _take_skip_locked(tenant_id: int, operation_id: str, until: datetime, now: datetime) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            _TAKE,
            {
                "until": until,
                "operation": operation_id,
                "tenant": tenant_id,
                "bound": bound(),
                "now": now,
            },
        )
        return int(cursor.rowcount)


def _add(*, tenant_id: int, operation_id: str, until: datetime) -> bool:
    """Make one of the tenant's missing slots, held; False if it has them all.

    The tenant's first attempts may all come at once: each tries the
    missing numbers in turn, and the database gives each number to one.
    """
    numbers = set(
        DeliverySlot.objects.filter(tenant_id=tenant_id, number__lt=bound()).values_list(
            "number", flat=True
        )
    )
    for missing in (n for n in range(bound()) if n not in numbers):
        try:
            # A savepoint: the loser of the race may be inside a transaction.
            with transaction.atomic():
                DeliverySlot.objects.create(
                    tenant_id=tenant_id, number=missing, busy_until=until, busy_by=operation_id
                )
        except IntegrityError:
            continue  # another attempt made it first, and holds it
        return True
    return False


def release(*, tenant_id: int, operation_id: str, until: datetime | None = None) -> bool:
    """Let go of the slot the operation holds (the hold ending at ``until``, if given)."""
    held = DeliverySlot.objects.filter(tenant_id=tenant_id, busy_by=operation_id)
    if until is not None:
        # Only our own hold: if it lapsed and another attempt took the slot,
        # that one keeps it.
        held = held.filter(busy_until=until)
    return bool(held.update(busy_until=None, busy_by=""))


def has_room(tenant_id: int) -> bool:
    """Whether the tenant has fewer attempts in flight than its bound."""
    busy = DeliverySlot.objects.filter(
        tenant_id=tenant_id, number__lt=bound(), busy_until__gte=timezone.now()
    ).count()
    return busy < bound()
