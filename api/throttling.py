from typing import cast

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle


class PrincipalRateThrottle(SimpleRateThrottle):
    """``API_THROTTLE_RATE`` (e.g. ``100/min``) per principal; off when unset.

    Counts live in Django's cache, which is per process unless a shared
    cache is configured.
    """

    scope = "principal"

    def get_rate(self) -> str | None:
        # Read when the throttle is made, not when DRF's settings were first
        # imported, so that the setting is the one in force.
        from django.conf import settings

        rates = cast(dict[str, str | None], settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"])
        return rates.get(self.scope)

    def get_cache_key(self, request: Request, view: object) -> str | None:
        principal = request.user
        if principal is None:
            return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
        return self.cache_format % {"scope": self.scope, "ident": principal.pk}
