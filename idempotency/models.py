"""The record of one idempotent command: what was asked, and the answer it earned."""

from django.db import models
from django.utils import timezone


class IdempotencyKey(models.Model):
    """One ``Idempotency-Key`` of one principal, and what its first request asked.

    The row is inserted when a command claims its key, in the same
    transaction as the command's effects and its answer (:class:`StoredAnswer`).
    Nobody else ever sees it half done: until that transaction commits, a
    duplicate's INSERT of the same key waits on the unique index, which is
    how the database, not our code, decides who runs and makes the rest
    wait. If the claiming process dies, its transaction rolls back and takes
    the claim with it, so no key is ever left stuck "in progress".

    The row is written once and never updated: the answer, known only when
    the command is done, is a row of its own. Updating the claim in place
    cost PostgreSQL a second version of the whole row (and a dead one for
    vacuum to clear) for every command; inserting the answer beside it
    costs a narrow row (docs/SCALING.md).
    """

    # Neither foreign key has an index of its own, nor a constraint in the
    # database: every claim pays for each index the row has, and a
    # constraint would make every command's COMMIT look up the principal
    # and the tenant and lock their rows (FOR KEY SHARE), rows that every
    # command of the tenant locks alike. The key is written by the request
    # that the principal has just authenticated; Django's CASCADE deletes a
    # principal's keys with it, and the unique index, which leads with the
    # principal, serves that cascade. A tenant's keys go with its
    # principals, which PROTECT it: deleting a tenant, which then has no
    # keys, scans this table: a rare act, not worth an index on every claim.
    tenant = models.ForeignKey(
        "accounts.Tenant",
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    principal = models.ForeignKey(
        "accounts.Principal",
        on_delete=models.CASCADE,
        related_name="idempotency_keys",
        db_index=False,
        db_constraint=False,
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

    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    # The key's answer, when the row was read with it (select_related).
    answer: "StoredAnswer"

    class Meta:
        constraints = [
            # The claim. Two requests with one key race to insert this row;
            # the database lets exactly one win. The principal leads, so no
            # principal index is needed beside it: with one, the planner took
            # it for a statement by the principal and the key while the table
            # was young (both estimated one row) and read every key of the
            # principal: 135 per statement on average over the first 564
            # commands of `make bench`.
            models.UniqueConstraint(
                fields=["principal", "tenant", "key"], name="idempotency_key_unique_per_principal"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.request_method} {self.request_path})"

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()


class StoredAnswer(models.Model):
    """The answer a key's first request earned: replayed, byte for byte, to every retry.

    Inserted in the transaction that inserted its key, so every committed
    key has one; deleted with its key (the purge deletes both in one
    statement, Django's CASCADE both everywhere else). No constraint in the
    database ties it to its key: it would check the key at every command's
    COMMIT for what the one statement that writes both already guarantees.
    """

    key = models.OneToOneField(
        IdempotencyKey,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="answer",
        db_constraint=False,
    )
    status = models.PositiveSmallIntegerField()
    body = models.BinaryField()
    # The answer's own headers (Content-Type, Location, Retry-After), which
    # a replay carries again.
    headers = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"{self.status} to {self.key_id}"


class StorageUsage(models.Model):
    """Bytes a principal's keys hold, by when they expire: the running total of rule 12.

    One row per (principal, expiry bucket, shard), added to by every command
    that stores an answer (idempotency/quota.py explains the buckets and the
    shards). A bucket's row is never decremented: once its last key has
    expired it is not counted and the purge deletes it, so the total needs
    neither a ``sum()`` over the keys nor a write at every key's expiry.
    """

    principal = models.ForeignKey(
        "accounts.Principal",
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    # The end of the bucket: every key counted here has expired by then.
    expires_by = models.DateTimeField()
    shard = models.PositiveSmallIntegerField()
    bytes = models.BigIntegerField()

    class Meta:
        constraints = [
            # The upsert's arbiter, and the quota check's index: a principal's
            # live buckets are one range of it.
            models.UniqueConstraint(
                fields=["principal", "expires_by", "shard"],
                name="idempotency_storage_usage_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.bytes} B of principal {self.principal_id} by {self.expires_by}"
