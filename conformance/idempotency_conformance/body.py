"""Request bodies: templates with ``{n}``, JSON Pointer edits, and other spellings.

A body template is JSON text whose strings may hold ``{n}``: each rendering
replaces every ``{n}`` with one fresh value, so that each request the kit
means to be new is new to the API (a new customer id, a new resource id).
Templates are edited as parsed JSON, never as text, so that a value never
has to be escaped by hand.
"""

import json
from collections.abc import Callable
from typing import Any

JSON = Any
PLACEHOLDER = "{n}"


class ConfigError(ValueError):
    """The kit was told something it cannot use (a body that is not JSON, a pointer to nothing)."""


def parse_template(text: str, *, what: str) -> JSON:
    """The JSON value of a body template.

    :raises ConfigError: the text is not JSON.
    """
    try:
        return json.loads(text)
    except ValueError as error:
        raise ConfigError(f"{what} is not JSON: {error}") from error


def fill(value: JSON, fresh: str) -> JSON:
    """A copy of ``value`` with ``{n}`` replaced by ``fresh`` in every string, member names too."""
    return _map_strings(value, lambda text: text.replace(PLACEHOLDER, fresh))


def _map_strings(value: JSON, change: Callable[[str], str]) -> JSON:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [_map_strings(item, change) for item in value]
    if isinstance(value, dict):
        return {change(name): _map_strings(item, change) for name, item in value.items()}
    return value


def encode(value: JSON) -> bytes:
    """The compact UTF-8 JSON a client would send first."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


# --- JSON Pointer (RFC 6901) ---------------------------------------------------


def pointer_tokens(pointer: str) -> list[str]:
    """The reference tokens of ``pointer``, unescaped (``~1`` is ``/``, ``~0`` is ``~``).

    :raises ConfigError: not a JSON Pointer (it must be empty or start with ``/``).
    """
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ConfigError(f"{pointer!r} is not a JSON Pointer: it must start with '/'")
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def _step(container: JSON, token: str, pointer: str) -> tuple[JSON, str | int]:
    """The member or element ``token`` names in ``container``, and its index there."""
    if isinstance(container, dict) and token in container:
        return container[token], token
    if isinstance(container, list) and token.isdigit() and int(token) < len(container):
        return container[int(token)], int(token)
    raise ConfigError(f"{pointer} names nothing in the body")


def varied(value: JSON, pointer: str) -> JSON:
    """A copy of ``value`` whose member at ``pointer`` is changed.

    A string gets a suffix, a number one more, a boolean its negation: a
    value another request would plausibly send, and a different one.

    :raises ConfigError: the pointer names nothing, or a value neither
        string, number nor boolean.
    """
    tokens = pointer_tokens(pointer)
    if not tokens:
        raise ConfigError("--vary must name a member of the body, not the whole body")
    copy: JSON = json.loads(json.dumps(value))
    parent: JSON = copy
    for token in tokens[:-1]:
        parent, _ = _step(parent, token, pointer)
    current, index = _step(parent, tokens[-1], pointer)
    parent[index] = _changed(current, pointer)
    return copy


def _changed(current: JSON, pointer: str) -> JSON:
    if isinstance(current, bool):
        return not current
    if isinstance(current, str):
        return current + "-changed"
    if isinstance(current, int | float):
        return current + 1
    raise ConfigError(f"{pointer} names a {type(current).__name__}: vary a string or a number")


# --- Another spelling of the same JSON -------------------------------------------


def respelled(value: JSON) -> bytes:
    """``value`` spelled otherwise: members in reverse order, other white space, ``2`` as ``2.0``.

    RFC 8785 gives both spellings the same canonical form, so an API that
    fingerprints the canonical JSON takes this for the same request.
    """
    return _respell(value, 0).encode()


def _respell(value: JSON, depth: int) -> str:
    pad = "  " * (depth + 1)
    if isinstance(value, dict):
        members = [f"{pad}{json.dumps(k)} : {_respell(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(reversed(members)) + "\n" + "  " * depth + "}"
    if isinstance(value, list):
        return "[ " + " , ".join(_respell(item, depth + 1) for item in value) + " ]"
    if isinstance(value, int) and not isinstance(value, bool):
        # An integer with a fraction of zero: the same number to RFC 8785.
        return f"{value}.0"
    return json.dumps(value)
