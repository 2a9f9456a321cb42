"""The API's section 3: every state-changing endpoint under /v1/ is an idempotent command.

So that each of the idempotency rules (Rule 1 — Key to Rule 10 — Retention,
in test_rules.py) holds for every command, not only for those tested there.
"""

from collections.abc import Iterator, Sequence
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver

STATE_CHANGING = ("post", "put", "patch", "delete")


def api_views(
    patterns: Sequence[URLPattern | URLResolver] | None = None, prefix: str = ""
) -> Iterator[tuple[str, type[Any]]]:
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(entry, URLResolver):
            yield from api_views(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern) and (prefix + str(entry.pattern)).startswith("v1/"):
            view_class = getattr(entry.callback, "cls", None)
            if view_class is not None:
                yield prefix + str(entry.pattern), view_class


def test_every_state_changing_method_under_v1_is_an_idempotent_command() -> None:
    commands = [
        (route, name, getattr(view_class, name))
        for route, view_class in api_views()
        for name in STATE_CHANGING
        if hasattr(view_class, name)
    ]

    assert commands, "no command endpoints found"
    undecorated = [
        (route, name)
        for route, name, method in commands
        if not getattr(method, "idempotent_command", False)
    ]
    assert undecorated == []
