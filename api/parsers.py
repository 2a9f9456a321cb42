"""Request body parsing: strict JSON, as I-JSON (RFC 7493) defines it.

Bodies are fingerprinted by their RFC 8785 canonical form, which exists
only for I-JSON: UTF-8, unique member names, numbers that an IEEE 754
double holds (integers exactly) and no lone surrogates. A body outside it
is refused as ``400 MalformedJson`` before any command starts, rather than
meaning different things to different readers.

The body may be hostile, so parsing stays linear and cheap whatever its
shape: the C parser does the work, and Python hooks run only where a
check needs them. A quick scan of the raw bytes tells whether a number
could be out of range or a string could hold a lone surrogate; most bodies
need neither check. Messages speak of the body, never of the parser.
"""

import json
import math
import re
from itertools import accumulate
from typing import Any

from django.utils.http import parse_header_parameters
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.parsers import JSONParser

# Integers beyond 2**53 lose precision in a double (and in JavaScript).
MAX_SAFE_INTEGER = 2**53 - 1
# The raw body with every digit written "0", every exponent marker "e" and
# every sign "+": the shapes of its numbers are then plain substrings,
# which bytes.find locates at memchr speed.
_NUMBER_SHAPE = bytes.maketrans(b"123456789E-", b"000000000e+")
# 2**53 has 16 digits: a shorter run of digits is always a safe integer.
_LONG_INTEGER = b"0" * 16
# A double overflows above about 1.8e308: only with an exponent of three
# digits, or with over 200 digits before an exponent of at most 99.
_LARGE_EXPONENTS = (b"e000", b"e+000")
_LONG_MANTISSA = b"0" * 200
_NUL_ESCAPE = b"\\u0000"
# A \u escape of a surrogate, which might have no partner.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

# Far deeper than any command body (an order nests three levels), and far
# below what Python's recursion limit lets the C parser and encoder reach,
# which differs between interpreters and with the stack in use: every step
# after the parser can then walk the body without running out of stack.
MAX_DEPTH = 256
# A JSON string, the unrolled-loop way: runs of plain bytes are matched in
# one step, so that a long string costs one pass.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_NESTING = [0] * 256
for _opener, _closer in (b"[]", b"{}"):
    _NESTING[_opener], _NESTING[_closer] = 1, -1

_SAFE_INTEGER_MESSAGE = f"Integers must lie within ±{MAX_SAFE_INTEGER}."


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ParseError("JSON objects must not repeat a member name.")
    return result


def _object_without_nul_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Member names become the JSON Pointers stored with an idempotency key,
    # and PostgreSQL text cannot hold U+0000: such a body would fail as it is
    # stored (a 500) rather than be refused. No member of this API has one.
    result = _object(pairs)
    if "\x00" in "".join(result):
        raise ParseError("JSON member names must not contain U+0000.")
    return result


def _integer(text: str) -> int:
    # Checked on the text first: converting thousands of digits is itself
    # slow, and Python refuses it with a message of its own.
    if len(text.lstrip("-")) > len(str(MAX_SAFE_INTEGER)):
        raise ParseError(_SAFE_INTEGER_MESSAGE)
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise ParseError(_SAFE_INTEGER_MESSAGE)
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ParseError("Numbers must lie within the range of a double (about ±1.8e308).")
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
    except UnicodeDecodeError:
        raise ParseError("The body is not UTF-8 text.") from None
    if _depth(raw) > MAX_DEPTH:
        raise ParseError(f"JSON arrays and objects may nest at most {MAX_DEPTH} levels.")
    shape = raw.translate(_NUMBER_SHAPE)
    may_overflow = _LONG_MANTISSA in shape or any(e in shape for e in _LARGE_EXPONENTS)
    try:
        value = json.loads(
            text,
            # U+0000 can only arrive escaped: most bodies need no name check.
            object_pairs_hook=_object_without_nul_names if _NUL_ESCAPE in raw else _object,
            parse_int=_integer if _LONG_INTEGER in shape else None,
            parse_float=_float if may_overflow else None,
            parse_constant=_constant,
        )
    except json.JSONDecodeError as exc:
        raise ParseError(
            f"The body is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
        ) from None
    if _SURROGATE_ESCAPE.search(raw) and not _is_well_formed_unicode(value):
        raise ParseError("Strings must not hold a lone UTF-16 surrogate.")
    return value


def _depth(raw: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (0 if it cannot exceed the limit)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return 0
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    # A running sum of +1 and -1, computed by C iterators: no Python per bracket.
    return max(accumulate(map(_NESTING.__getitem__, brackets)), default=0)


def _is_well_formed_unicode(value: Any) -> bool:
    # The C encoder writes the surrogates as they are; only a lone one then
    # fails to encode as UTF-8.
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# The one media type a body of this API has.
JSON_MEDIA_TYPE = "application/json"


def is_json_media_type(content_type: str | None) -> bool:
    """Whether a request's ``Content-Type`` says ``application/json`` (in any case).

    Its parameters do not count: RFC 8259 defines none for the type, and a
    body is read as UTF-8 whatever a ``charset`` claims (one that is not
    UTF-8 is ``400 MalformedJson``).
    """
    try:
        media_type, _ = parse_header_parameters(content_type or "")
    except ValueError:
        # Django's refusal of an over-long or badly encoded parameter.
        return False
    return bool(media_type == JSON_MEDIA_TYPE)


class StrictJSONParser(JSONParser):
    """``application/json`` bodies, and no others, parsed by :func:`loads_strict`.

    DRF picks this parser for any request type that *matches*
    ``application/json``, and ``*/*`` or ``application/*`` does: a body that
    names no type of its own would be run as a command. Nor is a ``+json``
    type (RFC 6839) taken: it says the syntax is JSON but the meaning is its
    own type's (``application/merge-patch+json``: ``null`` deletes), which no
    route of this API defines; reading it as a plain document would carry
    out what the client did not mean. Those are ``415 UnsupportedMediaType``,
    like any other type.
    """

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        if not is_json_media_type(media_type):
            raise UnsupportedMediaType(media_type or "")
        return loads_strict(stream.read())
