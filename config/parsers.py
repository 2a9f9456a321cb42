"""Request body parsing: strict JSON, as I-JSON (RFC 7493) defines it.

Bodies are fingerprinted by their RFC 8785 canonical form, which exists
only for I-JSON: unique member names and numbers that an IEEE 754 double
holds exactly. A body outside it is refused as ``400 MalformedJson`` before
any command starts, rather than meaning different things to different
readers.
"""

import json
import math
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

# Integers beyond 2**53 lose precision in a double (and in JavaScript).
_MAX_SAFE_INTEGER = 2**53 - 1


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ParseError("JSON objects must not repeat a member name.")
    return result


def _integer(text: str) -> int:
    value = int(text)
    if abs(value) > _MAX_SAFE_INTEGER:
        raise ParseError(f"Integers must lie within ±{_MAX_SAFE_INTEGER}.")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ParseError("Numbers must be finite.")
    return value


def _constant(name: str) -> Any:
    raise ParseError(f"{name} is not a JSON number.")


def loads_strict(raw: bytes) -> Any:
    """Parse an I-JSON document.

    :raises ParseError: the body is not JSON, or not I-JSON.
    """
    try:
        # I-JSON is UTF-8; json.loads alone would also take UTF-16 and UTF-32.
        text = raw.decode("utf-8")
        return json.loads(
            text,
            object_pairs_hook=_object,
            parse_int=_integer,
            parse_float=_float,
            parse_constant=_constant,
        )
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"The body is not valid JSON: {exc}") from None


class StrictJSONParser(JSONParser):
    """``application/json`` bodies, parsed by :func:`loads_strict`."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = loads_strict(stream.read())
        # Member names become JSON Pointers in the stored field digests of an
        # idempotency key, and PostgreSQL text cannot hold U+0000: such a body
        # would fail as it is stored (a 500) rather than be refused. No member
        # of this API has such a name.
        if _has_nul_member_name(data):
            raise ParseError("JSON member names must not contain U+0000.")
        return data


def _has_nul_member_name(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if any("\x00" in name for name in item):
                return True
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False
