"""The record of one idempotent command, kept to replay its answer."""

from django.db import models
from django.utils import timezone


class IdempotencyKey(models.Model):
    """One ``Idempotency-Key`` of one principal, and the response it earned.

    The row is inserted when a command claims its key and completed (the
    ``response_*`` fields) in the same transaction as the command's effects.
    Nobody else ever sees it half done: until that transaction commits, a
    duplicate's INSERT of the same key waits on the unique index, which is
    how the database, not our code, decides who runs and makes the rest
    wait. If the claiming process dies, its transaction rolls back and takes
    the claim with it, so no key is ever left stuck "in progress".
    """

    # Neither foreign key has an index of its own: every claim pays for each
    # index the row has. The claim's unique index leads with the principal,
    # so it serves a principal's cascade. A tenant's keys go with its
    # principals, which PROTECT it: deleting a tenant, which then has no
    # keys, scans this table: a rare act, not worth an index on every claim.
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    principal = models.ForeignKey(
        "accounts.Principal",
        on_delete=models.CASCADE,
        related_name="idempotency_keys",
        db_index=False,
    )
    key = models.CharField(max_length=255)

    # What was asked: kept to tell a replay from a conflict.
    request_method = models.CharField(max_length=10)
    request_path = models.CharField(max_length=2048)
    # SHA-256 of method, path and the RFC 8785 canonical body.
    fingerprint = models.CharField(max_length=64)
    # JSON Pointer -> keyed digest of that part of the body, so a conflict can
    # say where two bodies differ without the server keeping either body.
    field_digests = models.JSONField(default=dict)

    # What was answered. Null only inside the claiming transaction.
    response_status = models.PositiveSmallIntegerField(null=True)
    response_body = models.BinaryField(default=b"")
    response_headers = models.JSONField(default=dict)

    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            # The claim. Two requests with one key race to insert this row;
            # the database lets exactly one win. The principal leads, so no
            # principal index is needed beside it: with one, the planner took
            # it for the store's UPDATE while the table was young (both
            # estimated one row) and read every key of the principal: 135 per
            # UPDATE on average over the first 564 commands of `make bench`.
            models.UniqueConstraint(
                fields=["principal", "tenant", "key"], name="idempotency_key_unique_per_principal"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.request_method} {self.request_path})"

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()
