"""``Authorization: Bearer <token>``."""

import functools
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from accounts.models import ApiToken, Principal, Tenant
from api.plain_reads import Selected, split


class BearerTokenAuthentication(BaseAuthentication):
    """Authenticate a principal by an API token.

    No header means anonymous (``401 NotAuthenticated`` where a principal is
    required); a header that is not a well-formed bearer token, or a token
    we do not know, is ``401 AuthenticationFailed``.
    """

    def authenticate(self, request: Request) -> tuple[Principal, ApiToken] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "").strip()
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise AuthenticationFailed("Expected 'Authorization: Bearer <token>'.")
        api_token = live_token(ApiToken.digest_of(token))
        if api_token is None:
            raise AuthenticationFailed("Unknown or revoked API token.")
        return api_token.principal, api_token

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="order-service"'


def principal_of(request: Request) -> Principal:
    """The authenticated principal of a request that passed IsAuthenticated."""
    return cast(Principal, request.user)


_TOKEN = Selected.of(ApiToken, "t", "id", "principal", "prefix", "created_at")
_PRINCIPAL = Selected.of(Principal, "p")
_TENANT = Selected.of(Tenant, "n")


def live_token(digest: str) -> ApiToken | None:
    """The unrevoked token of this digest, with its principal and tenant: one query.

    ``ApiToken.objects.select_related("principal__tenant").filter(digest=digest,
    revoked_at__isnull=True).first()``, as plain SQL (api/plain_reads.py):
    every request runs it.
    """
    db = connections[DEFAULT_DB_ALIAS]
    with db.cursor() as cursor:
        cursor.execute(_token_sql(db.vendor), [digest])
        row = cursor.fetchone()
    if row is None:
        return None
    token_values, principal_values, tenant_values = split(row, _TOKEN, _PRINCIPAL, _TENANT)
    api_token = _TOKEN.instance(db, token_values)
    principal = _PRINCIPAL.instance(db, principal_values)
    principal.tenant = _TENANT.instance(db, tenant_values)
    api_token.principal = principal
    return api_token


@functools.cache
def _token_sql(vendor: str) -> str:
    db: BaseDatabaseWrapper = connections[DEFAULT_DB_ALIAS]
    return (
        f"SELECT {_TOKEN.columns(db)}, {_PRINCIPAL.columns(db)}, {_TENANT.columns(db)}"  # noqa: S608
        f" FROM {_TOKEN.table(db)}"
        f" JOIN {_PRINCIPAL.table(db)}"
        f" ON {_PRINCIPAL.column(db, 'id')} = {_TOKEN.column(db, 'principal')}"
        f" JOIN {_TENANT.table(db)}"
        f" ON {_TENANT.column(db, 'id')} = {_PRINCIPAL.column(db, 'tenant')}"
        f" WHERE {_TOKEN.column(db, 'digest')} = %s AND {_TOKEN.column(db, 'revoked_at')} IS NULL"
    )
