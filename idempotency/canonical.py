"""RFC 8785 (JSON Canonicalization Scheme) at the speed of the json module's C encoder.

A command's fingerprint hashes its body in the RFC 8785 form, so that form
is computed for every command, and a hostile body of 1 MiB must cost
milliseconds, not seconds. The ``rfc8785`` package, the reference this
module is tested against, is pure Python: it visits the value one node at
a time and escapes strings one character at a time, several times slower
than the C encoder on large bodies (docs/SCALING.md, "Hostile bodies").
``json.dumps`` with sorted keys and no white space writes the same bytes
in C except for three details, which are mended here:

- **Numbers.** Both write a double with its shortest round-trip digits,
  but ECMAScript (whose spelling RFC 8785 takes) writes integral values
  without a fraction (``2.0`` → ``2``, ``1e+16`` → ``10000000000000000``)
  and small ones with plain exponents (``1e-07`` → ``1e-7``, ``1e-05`` →
  ``0.00001``). Only those number tokens are respelled.
- **Member order.** RFC 8785 sorts names by UTF-16 code units, Python by
  code points. The two orders differ only between characters above U+FFFF
  and characters from U+E000 to U+FFFF; when a value holds both, its
  objects are sorted again.
- **Strings.** Both escape exactly ``"``, ``\\`` and the control
  characters, with the same short forms and lowercase ``\\u00xx``, so no
  mending is needed. A lone surrogate, which RFC 8785 cannot encode, fails
  the final UTF-8 encoding.

The work is linear in the size of the value whatever its shape: one C
pass, plus, only when a mended case occurs, a few more passes in C and one
Python call per distinct respelled number. ``tests/idempotency/test_canonical_json.py``
checks the result byte for byte against ``rfc8785``.
"""

import json
import re
from json.encoder import encode_basestring
from typing import Any

# A JSON string as json.dumps writes it: quotes inside are always escaped.
_STRING = re.compile(r'("(?:[^"\\]|\\.)*")')
# Python float spellings that ECMAScript writes otherwise. Integral values
# below 1e16 ("2.0", "-0.0") just lose their fraction. The others, integral
# values from 1e16 to 1e21 ("1e+16") and exponents from -5 to -9 ("1e-05"),
# are respelled token by token. Each first check starts with a literal,
# which the regular expression engine finds at memchr speed; a hit inside a
# string only costs the precise pass, which looks at numbers alone.
_INTEGRAL_FRACTION = re.compile(r"\.0(?![0-9])")
_NEGATIVE_ZERO = re.compile(r"-0(?![0-9.e])")
_ODD_EXPONENT = re.compile(r"e(?:\+1[6-9]|\+20|-0[5-9])(?![0-9])")
_ODD_NUMBER = re.compile(r"(-?[0-9](?:\.[0-9]+)?e(?:\+1[6-9]|\+20|-0[5-9]))(?![0-9])")
# Strings never hold a raw NUL (json.dumps writes it \u0000), so it can
# stand for each string while the numbers between them are mended.
_PLACEHOLDER = "\x00"
_ABOVE_BMP = re.compile("[\U00010000-\U0010ffff]")
_PRIVATE_USE_AND_UP = re.compile("[\ue000-\uffff]")


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 serialisation of a parsed I-JSON value.

    :raises ValueError: the value has no RFC 8785 form (a non-finite number,
        a lone surrogate).
    """
    kind = type(value)
    if kind is str:
        # A lone string: no member order and no number to mend. Most parts
        # a claim digests are strings or integers (field digests), and this
        # skips the encoder's set-up and the checks of the general path.
        return _utf8(encode_basestring(value))
    if kind is int:
        # Integers are spelled alike by Python and ECMAScript (the parser
        # admits none beyond ±(2^53 - 1), where doubles would round them).
        return int.__repr__(value).encode()
    text = _dumps(value, sort_keys=True)
    if _ABOVE_BMP.search(text) and _PRIVATE_USE_AND_UP.search(text):
        text = _dumps(_in_utf16_order(value), sort_keys=False)
    if _INTEGRAL_FRACTION.search(text) or _ODD_EXPONENT.search(text):
        text = _mend_numbers(text)
    return _utf8(text)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("A string holds a lone UTF-16 surrogate.") from None


def _dumps(value: Any, *, sort_keys: bool) -> str:
    return _ENCODERS[sort_keys].encode(value)


# json.dumps with any argument of its own builds a new encoder per call, which
# costs as much as encoding a small value: a claim encodes every part of its
# body (field digests), so the two encoders are built once. They keep no
# state between calls.
_ENCODERS = {
    sort_keys: json.JSONEncoder(
        ensure_ascii=False, allow_nan=False, sort_keys=sort_keys, separators=(",", ":")
    )
    for sort_keys in (False, True)
}


def _mend_numbers(text: str) -> str:
    pieces = _STRING.split(text)  # outside strings, strings, outside, ...
    skeleton = _PLACEHOLDER.join(pieces[0::2])
    if _INTEGRAL_FRACTION.search(skeleton):
        skeleton = _NEGATIVE_ZERO.sub("0", _INTEGRAL_FRACTION.sub("", skeleton))
    if _ODD_EXPONENT.search(skeleton):
        tokens = _ODD_NUMBER.split(skeleton)  # between, number, between, ...
        # Each distinct number is respelled once, and the C loop of map()
        # puts the spellings in place: a body of many odd numbers costs a
        # dictionary look-up for each.
        spelled = {token: _ecmascript_spelling(token) for token in set(tokens[1::2])}
        tokens[1::2] = map(spelled.__getitem__, tokens[1::2])
        skeleton = "".join(tokens)
    pieces[0::2] = skeleton.split(_PLACEHOLDER)
    return "".join(pieces)


def _ecmascript_spelling(token: str) -> str:
    """ECMAScript's spelling of a double Python spelled ``d[.ddd]e±NN``.

    Only exponents +16 to +20 (integral values: all the digits, then zeros)
    and -5 to -9 (-5 and -6 as plain decimals, the others with no leading
    zero in the exponent) reach here; the digits are the same in both.
    """
    sign = "-" if token.startswith("-") else ""
    mantissa, _, exponent = token.removeprefix("-").partition("e")
    digits = mantissa.replace(".", "")
    power = int(exponent)
    if power > 0:
        return sign + digits + "0" * (power + 1 - len(digits))
    if power >= -6:
        return sign + "0." + "0" * (-power - 1) + digits
    return f"{sign}{mantissa}e{power}"


def _utf16_key(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")


def _in_utf16_order(value: Any) -> Any:
    """A copy of ``value`` whose objects list their members in UTF-16 order.

    Iterative, so that a deeply nested body cannot exhaust Python's
    recursion limit here; only containers are visited one by one.
    """
    if not isinstance(value, _CONTAINERS):
        return value
    root = [value]
    pending: list[tuple[Any, Any]] = [(root, 0)]
    while pending:
        container, slot = pending.pop()
        item = container[slot]
        if isinstance(item, dict):
            copy: Any = {name: item[name] for name in sorted(item, key=_utf16_key)}
            slots = [name for name, child in copy.items() if isinstance(child, _CONTAINERS)]
        else:
            copy = list(item)
            slots = [i for i, child in enumerate(copy) if isinstance(child, _CONTAINERS)]
        container[slot] = copy
        pending.extend((copy, child_slot) for child_slot in slots)
    return root[0]


_CONTAINERS = (dict, list)
