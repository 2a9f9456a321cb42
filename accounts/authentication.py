"""``Authorization: Bearer <token>``."""

from typing import Any, cast

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from accounts.models import ApiToken, Principal


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
        api_token = (
            ApiToken.objects.select_related("principal__tenant")
            .filter(digest=ApiToken.digest_of(token), revoked_at__isnull=True)
            .first()
        )
        if api_token is None:
            raise AuthenticationFailed("Unknown or revoked API token.")
        return api_token.principal, api_token

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="order-service"'


def principal_of(request: Request) -> Principal:
    """The authenticated principal of a request that passed IsAuthenticated."""
    return cast(Principal, request.user)
