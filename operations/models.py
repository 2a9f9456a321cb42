"""Asynchronous work, tracked in our own table (the outbox and the status a client polls)."""

from functools import partial

from django.db import models
from django.utils import timezone

from api.ids import new_id


class Operation(models.Model):
    """A unit of slow work, such as charging a payment, done by a Celery worker.

    The command that starts it inserts the row in its own transaction and
    publishes the task after commit; the row, not the broker, is the source
    of truth, so a lost message is found again by the sweep
    (:func:`operations.sweep.sweep_lost_operations`). ``status`` only
    moves forward (processing -> succeeded | failed), and every write of it
    is a compare-and-set on ``status='processing'``.
    """

    class Status(models.TextChoices):
        PROCESSING = "processing"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    id = models.CharField(primary_key=True, max_length=32, default=partial(new_id, "op"))
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    # A kind some app registered (operations.registry), such as "payment.charge".
    kind = models.CharField(max_length=32)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROCESSING)
    # The id of what the operation works on and leads to (links.result), as
    # its kind's registration spells it: a payment for a charge, for example.
    # Unique per tenant at most (an order's id is), hence the tenant in the
    # constraint below.
    result_id = models.CharField(max_length=68)
    # Why it failed, once it has; while it is processing, why its last
    # attempt failed (for the operator), which becomes the error it ends
    # with if no attempt succeeds.
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.CharField(max_length=500, blank=True)
    # Attempts claimed by a worker, the one under way included; at most
    # OPERATION_MAX_ATTEMPTS of them run the kind's handler
    # (operations.attempts.attempt_operation).
    attempts = models.PositiveIntegerField(default=0)
    # A worker holds the operation until then, and renews the lease while it
    # works; past it, a dead worker's operation can be claimed again.
    claimed_until = models.DateTimeField(null=True, blank=True)
    # When its newest message was published, the time that message carries
    # (operations.outbox.PUBLISHED_AT_HEADER); None while no message of it
    # is out (its publish failed). The sweep judges by it whether the
    # message is still queued or lost (operations.sweep.sweep_lost_operations).
    published_at = models.DateTimeField(null=True, blank=True)
    # Messages published for it: the first, one per retry, and one per copy
    # the sweep sent for a message presumed lost.
    publications = models.PositiveIntegerField(default=0)
    # The sweep leaves it alone until then: OPERATION_STALE_AFTER after a
    # publish, or after a retry's countdown; the end of the lease while a
    # worker holds it; now, after a failed publish.
    republish_at = models.DateTimeField(default=timezone.now)
    # The trace id of the request that started it, for logs across processes.
    trace_id = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # The sweep: processing operations, the longest due first.
            models.Index(
                fields=["republish_at"],
                condition=models.Q(status="processing"),
                name="operation_republish",
            ),
            # The oldest processing operation of each kind (its age is a
            # gauge at /metrics): one index probe per kind, whatever the
            # backlog.
            models.Index(
                fields=["kind", "created_at"],
                condition=models.Q(status="processing"),
                name="operation_processing_age",
            ),
            # The purge of ended operations, the longest ended first, and the
            # operator's count of those ended lately: only ended rows, so
            # neither reads the processing ones, nor the other way round.
            # An ended row is never written again, so its updated_at is when
            # it ended.
            models.Index(
                fields=["updated_at"],
                condition=models.Q(status__in=["succeeded", "failed"]),
                name="operation_ended",
            ),
        ]
        constraints = [
            # The same work is never under way twice, nor done twice: of the
            # operations of one kind on one result, one at most is processing
            # or succeeded; another may start only after a failure (a refund
            # refused by the provider may be asked for again).
            models.UniqueConstraint(
                fields=["tenant", "kind", "result_id"],
                condition=models.Q(status__in=["processing", "succeeded"]),
                name="operation_one_live_per_result",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.kind} {self.status}"

    @property
    def is_finished(self) -> bool:
        return self.status != self.Status.PROCESSING


class EndedCount(models.Model):
    """How many ended operations of a kind and status the table holds: ``operations``'s gauge.

    Counting them at each scrape read every row kept for
    ``OPERATION_RETENTION`` (millions); this is kept instead, in the
    transaction that ends an operation (+1) and in the one that purges it
    (-n), so the gauge reads a few rows whatever the table holds
    (operations.ended). Ends are spread over ``shard`` rows so that workers
    ending operations at once do not queue on one row's lock; the gauge
    adds the shards up, and a purge takes its count off shard 0.
    """

    kind = models.CharField(max_length=32)
    status = models.CharField(max_length=16)
    shard = models.PositiveSmallIntegerField()
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "status", "shard"], name="ended_count_key")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.status} #{self.shard}: {self.count}"
