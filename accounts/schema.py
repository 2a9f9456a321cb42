"""How drf-spectacular describes the API's authentication."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import build_bearer_security_scheme_object


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer <token>`` (accounts.authentication)."""

    target_class = "accounts.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {
            **build_bearer_security_scheme_object(
                header_name="Authorization",
                token_prefix="Bearer",  # noqa: S106 - a scheme name
            ),
            "description": (
                "An API token from `python manage.py create_api_client TENANT NAME`. "
                "No header: `401 NotAuthenticated`; an unknown, revoked or malformed "
                "one: `401 AuthenticationFailed`."
            ),
        }
