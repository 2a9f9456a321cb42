import secrets
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from accounts.models import ApiToken, Principal, Tenant

# Marks our tokens in logs and secret scanners; not itself a secret.
TOKEN_PREFIX = "osk_"  # noqa: S105


@dataclass(frozen=True)
class IssuedToken:
    principal: Principal
    token: str


def create_api_client(*, tenant_slug: str, name: str, revoke_earlier: bool = False) -> IssuedToken:
    """Create the tenant and principal if needed, and issue a new token.

    The token is returned once; only its digest is stored. With
    ``revoke_earlier`` the principal's other tokens stop working in the same
    transaction: a rotation never leaves the principal with no token, nor
    with the old one still valid.
    """
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        tenant, _ = Tenant.objects.get_or_create(slug=tenant_slug)
        principal, _ = Principal.objects.get_or_create(tenant=tenant, name=name)
        if revoke_earlier:
            principal.tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        ApiToken.objects.create(
            principal=principal, digest=ApiToken.digest_of(token), prefix=token[:12]
        )
    return IssuedToken(principal=principal, token=token)
