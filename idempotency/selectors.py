"""Reads of idempotency keys, scoped like the keys themselves (docs/SPECIFICATION.md §3 rule 11)."""

from django.utils import timezone

from accounts.models import Principal
from idempotency.errors import NoSuchIdempotencyKey
from idempotency.headers import KEY_PATTERN
from idempotency.models import IdempotencyKey

# What the look-up shows, and all that it loads: the request's fingerprint
# and field digests never leave the database, so no rendering can show them.
_SHOWN = (
    "key",
    "request_method",
    "request_path",
    "created_at",
    "expires_at",
    "answer__status",
    "answer__body",
    "answer__headers",
)


def get_idempotency_key(*, principal: Principal, key: str) -> IdempotencyKey:
    """One of ``principal``'s own keys, completed and not expired.

    Scoped as the key is, to (tenant, principal, key): another principal's
    key, in the same tenant or another, is as absent as an unknown one. A
    key past its ``expires_at`` is absent too, purged or not, as it is to a
    command, which would claim it anew. So is a key whose first request is
    still executing: its claim commits with the command, and until then no
    other transaction sees it; this read waits for no lock.

    :raises NoSuchIdempotencyKey: ``key`` cannot be a key, or names no such key.
    """
    # The header's grammar of a key, checked before the database is asked: a
    # segment no key can be (a space, 256 characters, a NUL byte, which
    # PostgreSQL would refuse) is not found, without a query.
    if not KEY_PATTERN.fullmatch(key):
        raise NoSuchIdempotencyKey()
    record = (
        IdempotencyKey.objects.select_related("answer")
        .filter(
            # Principal first: the claim's unique index leads with it.
            principal=principal,
            tenant_id=principal.tenant_id,
            key=key,
            expires_at__gt=timezone.now(),
            # Every committed key has its answer; this says so, not trusts it.
            answer__isnull=False,
        )
        .only(*_SHOWN)
        .first()
    )
    if record is None:
        raise NoSuchIdempotencyKey()
    return record
