"""Rule 3 — Fingerprint: properties of request fingerprints (idempotency.fingerprint).

The fingerprint must not see how a body is spelled (member order, white
space, number and string spelling) and must see every change of a value,
naming the changed part by its JSON Pointer. No test here touches the
database, but the suite starts only on PostgreSQL (tests/conftest.py), so
these run with ``DATABASE_URL`` set like every other test.
"""

import copy
import json
import math
import sys
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import rfc8785
from django.conf import settings as django_settings
from django.test import override_settings
from hypothesis import example, given, settings
from hypothesis import strategies as st

from api.parsers import MAX_SAFE_INTEGER, loads_strict
from idempotency.fingerprint import (
    MAX_FIELD_DIGEST_BYTES,
    MAX_FIELD_DIGESTS,
    MAX_POINTER_LENGTH,
    Fingerprint,
    _digest_chosen_parts,
    _digest_every_part,
    _keyed_hmac,
    field_digests_bytes,
    fingerprint_request,
    mismatched_pointers,
)

METHOD = "POST"
PATH = "/v1/orders"
JSON_WHITESPACE = " \t\n\r"
SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}

Segment = str | int
Path = tuple[Segment, ...]

# What loads_strict can return: finite doubles, safe integers, and text
# without lone surrogates (st.text() draws none).
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
# Member names often hold "~" and "/", which JSON Pointers escape; the
# parser refuses U+0000 in them (it cannot be stored with a key).
member_names = st.text(st.sampled_from("~/01a"), max_size=4) | st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(member_names, children, max_size=4)
    ),
    max_leaves=16,
)
# Command bodies are mostly objects; any JSON value is a valid body, though.
bodies = st.dictionaries(member_names, json_values, min_size=1, max_size=4) | json_values

example_settings = settings(max_examples=150, deadline=None)


def fingerprint(body: Any, *, method: str = METHOD, path: str = PATH) -> Fingerprint:
    return fingerprint_request(method=method, path=path, body=body)


# --- A randomised JSON writer ------------------------------------------------


def _whitespace(data: st.DataObject) -> str:
    """Insignificant white space, possibly none."""
    return data.draw(st.text(alphabet=JSON_WHITESPACE, max_size=2), label="ws")


def _spell_decimal(data: st.DataObject, value: Decimal) -> str:
    """Some JSON number text whose exact decimal value is ``value``."""
    sign, digit_tuple, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0") or "0"
    if digits == "0":
        exponent = 0
        sign = data.draw(st.integers(0, 1), label="zero sign")  # "-0" denotes 0 too
    padding = data.draw(st.integers(0, 3), label="trailing zeros")
    digits += "0" * padding
    exponent -= padding
    if digits[0] == "0":
        # 0, 0.0, 0.00, ...
        integer, fraction = "0", digits[1:]
    elif data.draw(st.booleans(), label="leading 0."):
        # 0.000ddd, and the exponent
        zeros = data.draw(st.integers(0, 2), label="leading zeros")
        integer, fraction = "0", "0" * zeros + digits
    else:
        # ddd.ddd (a digit at least before the point), and the exponent
        point = data.draw(st.integers(1, len(digits)), label="point")
        integer, fraction = digits[:point], digits[point:]
    exponent += len(fraction)
    text = "-" * sign + integer + ("." + fraction if fraction else "")
    # A number with neither fraction nor exponent is read as an integer,
    # which the parser bounds; beyond that it must stay a float.
    bare_integer = not fraction and exponent == 0
    if (bare_integer and abs(int(integer)) <= MAX_SAFE_INTEGER) and data.draw(
        st.booleans(), label="omit exponent"
    ):
        return text
    marker = data.draw(st.sampled_from(["e", "E"]), label="e")
    exponent_sign = "-" if exponent < 0 else data.draw(st.sampled_from(["", "+"]), label="e+")
    exponent_zeros = "0" * data.draw(st.integers(0, 2), label="exponent zeros")
    return f"{text}{marker}{exponent_sign}{exponent_zeros}{abs(exponent)}"


def _spell_number(data: st.DataObject, value: int | float) -> str:
    """A JSON number that reads back as the same integer or the same double."""
    if isinstance(value, int):
        return _spell_decimal(data, Decimal(value))
    # The exact binary value, its shortest round-trip form, and 17
    # significant digits all round (correctly) to the same double.
    source = data.draw(
        st.sampled_from([Decimal(value), Decimal(repr(value)), Decimal(f"{value:.17e}")]),
        label="number source",
    )
    return _spell_decimal(data, source)


def _spell_char(data: st.DataObject, char: str) -> str:
    """``char`` itself, its short escape, or its ``\\u`` escape (a surrogate pair past the BMP)."""
    choices = []
    if char not in '"\\' and ord(char) >= 0x20:
        choices.append(char)
    if char in SHORT_ESCAPES:
        choices.append(SHORT_ESCAPES[char])
    units = char.encode("utf-16-be")
    hex_form = data.draw(st.sampled_from(["04x", "04X"]), label="hex case")
    choices.append(
        "".join(
            f"\\u{int.from_bytes(units[i : i + 2], 'big'):{hex_form}}"
            for i in range(0, len(units), 2)
        )
    )
    return data.draw(st.sampled_from(choices), label="char")


def _spell_string(data: st.DataObject, value: str) -> str:
    return '"' + "".join(_spell_char(data, char) for char in value) + '"'


def respell(data: st.DataObject, value: Any) -> str:
    """``value`` as JSON text, with random member order, white space and spelling."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float):
        text = _spell_number(data, value)
    elif isinstance(value, str):
        text = _spell_string(data, value)
    elif isinstance(value, list):
        text = "[" + ",".join(respell(data, item) for item in value) + _whitespace(data) + "]"
    else:
        members = data.draw(st.permutations(list(value.items())), label="member order")
        text = (
            "{"
            + ",".join(
                f"{_whitespace(data)}{_spell_string(data, name)}{_whitespace(data)}:"
                f"{respell(data, item)}"
                for name, item in members
            )
            + _whitespace(data)
            + "}"
        )
    return _whitespace(data) + text + _whitespace(data)


# --- Tree helpers -------------------------------------------------------------


def leaf_paths(value: Any, path: Path = ()) -> list[Path]:
    """Paths to the scalars and the empty containers of ``value``."""
    if isinstance(value, dict) and value:
        return [p for name, item in value.items() for p in leaf_paths(item, (*path, name))]
    if isinstance(value, list) and value:
        return [p for index, item in enumerate(value) for p in leaf_paths(item, (*path, index))]
    return [path]


def pointer(path: Path) -> str:
    """The RFC 6901 JSON Pointer of ``path``."""
    return "".join("/" + str(s).replace("~", "~0").replace("/", "~1") for s in path)


def part(value: Any, path: Path) -> Any:
    """The part of ``value`` at ``path``."""
    for segment in path:
        value = value[segment]
    return value


def replaced(value: Any, path: Path, new: Any) -> Any:
    """A copy of ``value`` with the part at ``path`` replaced by ``new``."""
    if not path:
        return new
    result = copy.deepcopy(value)
    parent = result
    for segment in path[:-1]:
        parent = parent[segment]
    parent[path[-1]] = new
    return result


def changed_leaf(leaf: Any) -> Any:
    """A value that differs from ``leaf`` under JSON semantics."""
    if leaf is None:
        return 0
    if isinstance(leaf, bool):
        return not leaf
    if isinstance(leaf, int):
        return leaf + 1 if leaf < MAX_SAFE_INTEGER else leaf - 1
    if isinstance(leaf, float):
        # The neighbouring double; from ±0.0 that is 5e-324, not the other zero.
        return math.nextafter(leaf, math.inf if leaf < sys.float_info.max else -math.inf)
    if isinstance(leaf, str):
        return leaf + "x"
    return {} if isinstance(leaf, list) else []


# --- Properties ---------------------------------------------------------------


@example_settings
@given(body=bodies, data=st.data())
def test_spelling_does_not_change_the_fingerprint(body: Any, data: st.DataObject) -> None:
    """Member order, white space, and number and string spelling are not part of a command."""
    text = respell(data, body)
    respelled = loads_strict(text.encode())

    assert respelled == body  # the writer kept the values (2 == 2.0, -0.0 == 0)
    assert fingerprint(respelled) == fingerprint(body)


@example_settings
@given(body=bodies, data=st.data())
def test_changing_one_value_changes_the_digest_and_names_it(body: Any, data: st.DataObject) -> None:
    """Any changed value changes the fingerprint, and the field digests point at it."""
    path = data.draw(st.sampled_from(leaf_paths(body)), label="leaf")
    changed = replaced(body, path, changed_leaf(part(body, path)))

    before, after = fingerprint(body), fingerprint(changed)

    assert len(before.field_digests) < MAX_FIELD_DIGESTS  # every part has its digest
    assert after.digest != before.digest
    assert mismatched_pointers(before.field_digests, after.field_digests) == [pointer(path)]
    assert mismatched_pointers(after.field_digests, before.field_digests) == [pointer(path)]


@example_settings
@given(
    body=bodies,
    methods=st.lists(
        st.sampled_from(["POST", "PUT", "PATCH", "DELETE"]), min_size=2, max_size=2, unique=True
    ),
    paths=st.lists(
        st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=12).map(
            lambda tail: "/" + tail
        ),
        min_size=2,
        max_size=2,
        unique=True,
    ),
)
def test_method_and_path_are_part_of_the_fingerprint(
    body: Any, methods: list[str], paths: list[str]
) -> None:
    """The same body sent with another method or to another path is another command."""
    same = fingerprint(body, method=methods[0], path=paths[0]).digest

    assert fingerprint(body, method=methods[1], path=paths[0]).digest != same
    assert fingerprint(body, method=methods[0], path=paths[1]).digest != same


# Bodies near the limits: long member names (pointers past MAX_POINTER_LENGTH
# within a few levels, and past MAX_FIELD_DIGEST_BYTES) and wide containers
# (past MAX_FIELD_DIGESTS parts).
long_names = st.text(st.sampled_from("ab~/"), min_size=20, max_size=70)
wide_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, min_size=40, max_size=90)
        | st.dictionaries(long_names, children, max_size=3)
    ),
    max_leaves=400,
)


@example_settings
@given(body=bodies | wide_values)
@example(body={"items": list(range(MAX_FIELD_DIGESTS - 1))})  # as many parts as the budget
@example(body={"items": list(range(MAX_FIELD_DIGESTS))})  # one more
@example(body={"items": [{"qty": i} for i in range(200)]})  # 401 parts
@example(body={"n" * 60: {"m" * 60: {"abcde": 1}}})  # a pointer of 128 characters
@example(body={"n" * 60: {"m" * 60: {"abcdef": 1}}})  # and of 129
@example(body={f"{'w' * 100}{i:03d}": i for i in range(100)})  # past the bytes, not the count
def test_one_walk_and_the_budgeted_choice_of_parts_give_the_same_digests(body: Any) -> None:
    """The walk that digests every part of a body within the limits is a shortcut, no more.

    Within the budget and the pointers' limit it must give each part the
    digest the general path (parts chosen breadth first, up to the budget)
    gives it, or stored keys would not compare with requests; past either
    it gives up, and the general path answers alone.
    """
    keyed = _keyed_hmac(django_settings.SECRET_KEY)
    pointers = list(_pointers(body))

    walked = _digest_every_part(body, keyed)

    if (
        len(pointers) <= MAX_FIELD_DIGESTS
        and max(map(len, pointers), default=0) <= MAX_POINTER_LENGTH
        and field_digests_bytes(dict.fromkeys(pointers, "")) <= MAX_FIELD_DIGEST_BYTES
    ):
        assert walked == _digest_chosen_parts(body, keyed)
        assert set(walked) == set(pointers)
    else:
        assert walked is None
    # What is stored with the key is bounded in bytes, whatever the body.
    assert field_digests_bytes(_digest_chosen_parts(body, keyed)) <= MAX_FIELD_DIGEST_BYTES


def _pointers(value: Any, pointer: str = "") -> Iterator[str]:
    """The JSON Pointer of every part of ``value``, the whole aside."""
    if isinstance(value, dict):
        slots = [name.replace("~", "~0").replace("/", "~1") for name in value]
        children = list(value.values())
    elif isinstance(value, list):
        slots, children = [str(i) for i in range(len(value))], value
    else:
        return
    for slot, child in zip(slots, children, strict=True):
        yield f"{pointer}/{slot}"
        yield from _pointers(child, f"{pointer}/{slot}")


# --- Examples -----------------------------------------------------------------


def test_member_names_are_escaped_in_pointers() -> None:
    """RFC 6901: "~" is written "~0" and "/" is written "~1"."""
    body = {"a/b": 1, "m~n": {"x~/y": 2}, "~1": 3}
    changed = {"a/b": 1, "m~n": {"x~/y": 20}, "~1": 3}

    digests = fingerprint(body).field_digests

    assert set(digests) == {"/a~1b", "/m~0n", "/m~0n/x~0~1y", "/~01"}
    assert mismatched_pointers(digests, fingerprint(changed).field_digests) == ["/m~0n/x~0~1y"]


def test_field_digests_do_not_hold_the_values() -> None:
    """The stored digests are short keyed hashes, not the body's values."""
    digests = fingerprint({"note": "secret-value-123", "items": [{"qty": 2}]}).field_digests

    assert "secret-value-123" not in json.dumps(digests)
    assert all(len(d) == 16 and set(d) <= set("0123456789abcdef") for d in digests.values())


def test_field_digests_are_keyed_by_the_secret_key() -> None:
    """Without SECRET_KEY a small value cannot be guessed back from its digest."""
    body = {"qty": 2}
    with override_settings(SECRET_KEY="one-secret-key-of-sufficient-length-0123456789"):
        one = fingerprint(body)
        one_digests = one.field_digests
    with override_settings(SECRET_KEY="another-secret-key-of-sufficient-length-012345"):
        another = fingerprint(body)
        another_digests = another.field_digests

    assert one.digest == another.digest
    assert one_digests != another_digests


def test_negative_zero_is_zero() -> None:
    """RFC 8785 writes -0 as 0, so -0.0, 0.0, -0 and 0 are one value."""
    spellings = [b'{"n":-0.0}', b'{"n":0.0}', b'{"n":-0}', b'{"n":0}', b'{"n":-0e5}']

    fingerprints = [fingerprint(loads_strict(raw)) for raw in spellings]

    assert rfc8785.dumps(-0.0) == b"0"
    assert all(f == fingerprints[0] for f in fingerprints)


def test_stored_fingerprints_and_digests_stay_comparable_across_releases() -> None:
    """The bytes a release computes for one body are those earlier releases stored.

    A key stored yesterday is compared with today's request: if a change of
    the code (a faster canonical form, another walk of the body) changed a
    fingerprint, every retry across the deploy would be a conflict; if it
    changed a field digest, conflicts would name parts that did not change.
    These values were computed before the hot path was last optimised.
    """
    body = {
        "customerId": "c-1",
        "items": [{"sku": "ABC", "qty": 2}, {"sku": "XYZ", "qty": 1.5e-7}],
        "currency": "RUB",
        "note": "é/~\U0001f600",
    }

    with override_settings(SECRET_KEY="one-secret-key-of-sufficient-length-0123456789"):
        computed = fingerprint(body)
        digests = computed.field_digests

    assert computed.digest == "a4e0f0ba8aab5b2c35a18851781c976f5877acb3e91dfeaeedd2ddc8b9cef976"
    assert digests == {
        "/currency": "067608b6fee93a14",
        "/customerId": "d2cd232e58866fa4",
        "/items": "21ab5a3308031162",
        "/note": "6ee75411adbac522",
        "/items/0": "47cac45f9c5d9bfc",
        "/items/1": "9320ab9242ae2f24",
        "/items/0/qty": "c5c7ffdc31a27a1c",
        "/items/0/sku": "b4ec16fd064df5b9",
        "/items/1/qty": "4e141c65b89dd072",
        "/items/1/sku": "eac06ab57917e01c",
    }
