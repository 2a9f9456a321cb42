"""The policy as data: what ``GET /v1/idempotency-policy`` answers (§3 rule 15).

A client that retries safely needs a few numbers (how long a key is kept,
how long a copy waits, how long a key may be held) and the list of the
routes that want a key. Written in a client's code, they go stale the day
an operator changes a setting or a command is added; read from here, they
are the running service's own. The numbers come from
:mod:`idempotency.policy`, as everywhere else; the commands are found in
the URL configuration, by the marker ``@idempotent_command`` leaves on each
handler, so that a new command is listed the moment it is routed and a
route cannot be listed without the protocol behind it
(tests/idempotency/test_policy_document.py holds the list to the routes).
"""

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.views import APIView

from api.openapi.hooks import openapi_path
from idempotency import fingerprint, policy
from idempotency.headers import HEADER

# How long a client may keep the document (``Cache-Control: max-age``). The
# numbers change only when the service restarts with other settings; a
# client that shortened its retries to a new, shorter retention at most
# this late would retry under a forgotten key for at most this long. The
# contract allows an hour; five minutes costs a client one small read.
MAX_AGE_SECONDS = 300

_STATE_CHANGING = ("post", "put", "patch", "delete")


@dataclass(frozen=True)
class CommandRoute:
    """A route that requires an ``Idempotency-Key``: ``POST /v1/orders``."""

    method: str
    # The OpenAPI path template: ``/v1/orders/{orderId}/cancel``.
    path: str

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def document() -> dict[str, Any]:
    """The policy, from the running settings and routes."""
    return {
        "header": HEADER,
        "keyMaxLength": policy.MAX_KEY_LENGTH,
        "retentionSeconds": int(policy.key_ttl().total_seconds()),
        "waitSeconds": policy.wait_seconds(),
        "lockTimeoutSeconds": policy.lock_timeout_seconds(),
        "storagePerPrincipalBytes": policy.storage_per_principal(),
        "fingerprint": {
            "canonicalization": fingerprint.CANONICALIZATION,
            "hash": fingerprint.HASH,
            "covers": list(fingerprint.COVERS),
        },
        "commands": [{"method": r.method, "path": r.path} for r in command_routes()],
    }


def command_routes() -> tuple[CommandRoute, ...]:
    """Every route of the URL configuration whose handler is an idempotent command, sorted."""
    return _command_routes(get_resolver())


# The URL configuration is fixed once loaded: walked once per resolver.
@functools.cache
def _command_routes(resolver: URLResolver) -> tuple[CommandRoute, ...]:
    routes = set(_walk(resolver.url_patterns, ""))
    return tuple(sorted(routes, key=lambda route: (route.path, route.method)))


def _walk(patterns: Sequence[URLPattern | URLResolver], prefix: str) -> Iterator[CommandRoute]:
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, route)
            continue
        view_class = getattr(entry.callback, "cls", None)
        if not (isinstance(view_class, type) and issubclass(view_class, APIView)):
            continue  # no DRF view, so no command (the protocol wraps APIView methods)
        # A ViewSet routes a method to an action (``create``); an APIView to its namesake.
        actions: dict[str, str] = getattr(entry.callback, "actions", None) or {}
        for method in _STATE_CHANGING:
            handler = getattr(view_class, actions.get(method, method), None)
            if getattr(handler, "idempotent_command", False) is True:
                yield CommandRoute(method.upper(), openapi_path(route))
