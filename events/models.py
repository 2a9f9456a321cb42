"""Events (what happened, once each) and their webhook deliveries.

An event is written in the transaction of the effect it records, by the
service or handler that makes the effect (docs/SPECIFICATION.md §4 rule
11): it exists exactly when its effect does. A delivery is one event's way
to one webhook endpoint; it is written in that same transaction, and an
operation (operations.services) carries it to the endpoint, so that its
message is published after commit, found again by the sweep when lost,
and attempted within a budget.
"""

from functools import partial

from django.db import models
from django.db.models.functions import Cast
from django.utils import timezone

from api.ids import new_id

EVENT_ID_MAX_LENGTH = 32


def transaction_id(*args: models.Expression, function: str) -> models.Expression:
    """A PostgreSQL function returning a transaction id (xid8), as a bigint.

    xid8 has no cast to bigint but through text; its 64 bits never wrap.
    """
    xid8 = models.Func(*args, function=function)
    return Cast(Cast(xid8, models.TextField()), models.BigIntegerField())


class Event(models.Model):
    # The row's own key: the order of insertion, a tie-breaker within one
    # transaction. Never shown.
    seq = models.BigAutoField(primary_key=True)
    id = models.CharField(
        max_length=EVENT_ID_MAX_LENGTH, unique=True, default=partial(new_id, "evt")
    )
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    # A registered type (events.registry), such as "order.created".
    type = models.CharField(max_length=32)
    # The path of the resource it is about (links.resource).
    resource = models.CharField(max_length=128)
    # The transaction that wrote it (PostgreSQL's xid8; an insertion counter
    # on SQLite, whose writers take turns). The feed is ordered by it, and
    # shows an event only once every older transaction has ended
    # (events.selectors.feed_of): so an event never appears before one the
    # consumer has already read past.
    txid = models.BigIntegerField()
    # The resource as its read endpoint showed it when the event happened.
    data = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # One event per effect, held by the database as well as by the
            # code: an order is created once and cancelled once, a payment
            # ends once and is refunded once, so (type, resource) names the
            # effect.
            models.UniqueConstraint(
                fields=["tenant", "type", "resource"], name="event_one_per_effect"
            ),
        ]
        indexes = [
            # The feed, and the feed of one type: a range scan from a cursor.
            models.Index(fields=["tenant", "txid", "seq"], name="event_feed"),
            models.Index(fields=["tenant", "type", "txid", "seq"], name="event_feed_by_type"),
            # The feed's horizon, across tenants: the first committed event
            # it does not show yet, whose age is a gauge at /metrics
            # (events.metrics.feed_lag). One index probe; txid grows, so
            # the index appends at its right end.
            models.Index(fields=["txid", "seq"], name="event_horizon"),
            # The purge: the oldest first.
            models.Index(fields=["created_at"], name="event_created"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.type}"


class WebhookEndpoint(models.Model):
    class Status(models.TextChoices):
        ENABLED = "enabled"
        DISABLED = "disabled"

    id = models.CharField(primary_key=True, max_length=32, default=partial(new_id, "whe"))
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    url = models.CharField(max_length=2048)
    # The event types it receives; ["*"] for every type.
    event_types = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ENABLED)
    # "whsec_" and the base64 of 32 random bytes: the key of the deliveries'
    # signatures. Shown once, in the answer to the command that made it.
    secret = models.CharField(max_length=64)
    # While an attempt to deliver to it is under way, when that attempt's
    # hold lapses: one attempt at a time per endpoint, so that a slow one
    # holds one worker at most (events.delivery).
    busy_until = models.DateTimeField(null=True, blank=True)
    # The operation whose attempt holds it: that operation's next attempt
    # takes the hold over at once (its worker died mid-attempt).
    busy_by = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-created_at", "-id"], name="webhook_endpoint_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.url}"

    def receives(self, event_type: str) -> bool:
        return "*" in self.event_types or event_type in self.event_types


class Delivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    id = models.CharField(primary_key=True, max_length=32, default=partial(new_id, "dlv"))
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # What the last attempt got: the endpoint's status code, or why there
    # was none (bounded: a receiver's words are not ours to keep whole).
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # Since when it waits because its tenant had WEBHOOK_TENANT_CONCURRENCY
    # attempts in flight (events.tenant_slots): the tenant's held deliveries
    # are sent on oldest first, one as each of its attempts ends.
    held_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # One delivery of an event per endpoint, however the fan-out runs.
            models.UniqueConstraint(fields=["event", "endpoint"], name="delivery_one_per_endpoint"),
        ]
        indexes = [
            # An endpoint's deliveries, newest first.
            models.Index(fields=["endpoint", "-created_at", "-id"], name="delivery_newest"),
            # The oldest pending delivery (its age is a gauge at /metrics).
            models.Index(
                fields=["created_at"],
                condition=models.Q(status="pending"),
                name="delivery_pending_age",
            ),
            # A tenant's oldest held delivery, looked up as each of its
            # attempts ends: it holds the held ones only, a few at most.
            models.Index(
                fields=["tenant", "held_at"],
                condition=models.Q(status="pending", held_at__isnull=False),
                name="delivery_held",
            ),
        ]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.id} {self.status}"


class DeliverySlot(models.Model):
    """One of a tenant's ``WEBHOOK_TENANT_CONCURRENCY`` delivery attempts in flight.

    A tenant's rows are made as its attempts first need them (numbers 0 to
    the bound less one), and each is held for one attempt at a time like an
    endpoint (events.tenant_slots).
    """

    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    number = models.PositiveSmallIntegerField()
    # When the attempt that holds it lapses; None while it is free.
    busy_until = models.DateTimeField(null=True, blank=True)
    # The operation whose attempt holds it: its next attempt takes it back at
    # once (its worker died mid-attempt).
    busy_by = models.CharField(max_length=32, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "number"], name="delivery_slot_number"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} #{self.number}"
