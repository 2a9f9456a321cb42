"""Rule 3 — Fingerprint: the canonical form a fingerprint hashes is RFC 8785's.

idempotency.canonical writes exactly the bytes of the RFC 8785 reference.
The fast canonicaliser mends the C encoder's output in three places
(number spelling, UTF-16 member order, lone surrogates); each is checked
against the ``rfc8785`` package, byte for byte, on random values and at
the boundaries where Python and ECMAScript spell numbers differently.
No database is needed.
"""

import json
import math
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from api.parsers import MAX_DEPTH, MAX_SAFE_INTEGER, loads_strict
from idempotency.canonical import canonical_json

# Doubles of every magnitude, and the ones whose spelling the mending
# changes: integral values, and exponents from -9 to -5 and 16 to 20.
doubles = st.floats(allow_nan=False, allow_infinity=False) | st.builds(
    lambda mantissa, exponent: mantissa * 10.0**exponent,
    st.floats(min_value=-9.999, max_value=9.999, allow_nan=False),
    st.sampled_from([-10, -9, -8, -7, -6, -5, -4, 15, 16, 17, 18, 19, 20, 21]),
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | doubles
    | st.integers(-(10**6), 10**6).map(float)
    | st.text(max_size=8)
)
# The parser refuses U+0000 in member names (it cannot be stored with a key).
any_but_nul = st.characters(codec="utf-8", exclude_characters="\x00")
# Names mixing characters above U+FFFF with U+E000-U+FFFF, the one place
# where UTF-16 order and code point order disagree.
names = st.text(
    st.sampled_from(["a", "b", "\ue000", "\uffff", "\U0001f600", "\U00010000"]), max_size=3
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(names | st.text(any_but_nul, max_size=4), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=1000, deadline=None)
@given(value=values)
def test_bytes_are_those_of_the_reference_implementation(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=300, deadline=None)
@given(value=values)
def test_parsed_bodies_canonicalise_like_the_reference(value: Any) -> None:
    """What the parser hands over (ints for 2, floats for 2.0) canonicalises alike."""
    parsed = loads_strict(json.dumps(value).encode())

    assert canonical_json(parsed) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    ("number", "spelling"),
    [
        (2.0, b"2"),
        (-0.0, b"0"),
        (1e15, b"1000000000000000"),
        (9007199254740994.0, b"9007199254740994"),
        (1e16, b"10000000000000000"),
        (1.2345678901234567e19, b"12345678901234567000"),
        (1e20, b"100000000000000000000"),
        (1e21, b"1e+21"),
        (1.5e300, b"1.5e+300"),
        (0.0001, b"0.0001"),
        (1.5e-5, b"0.000015"),
        (-1e-6, b"-0.000001"),
        (1e-7, b"1e-7"),
        (-3.3e-9, b"-3.3e-9"),
        (1e-10, b"1e-10"),
        (5e-324, b"5e-324"),
    ],
)
def test_numbers_are_spelled_as_ecmascript_spells_them(number: float, spelling: bytes) -> None:
    assert canonical_json([number, {"n": number}]) == b"[" + spelling + b',{"n":' + spelling + b"}]"
    assert rfc8785.dumps(number) == spelling


def test_number_lookalikes_inside_strings_are_left_alone() -> None:
    value: dict[str, Any] = {"a": "1.0", "b": "2e+16", "c": "1e-05", "d": [1.0, "x\\"]}

    assert canonical_json(value) == rfc8785.dumps(value)


def test_members_are_ordered_by_utf16_code_units() -> None:
    value = {"\ue000": 1, "\U0001f600": 2, "a": {"\uffff": 3, "\U00010000": 4}}

    assert canonical_json(value) == (
        '{"a":{"\U00010000":4,"\uffff":3},"\U0001f600":2,"\ue000":1}'.encode()
    )


@pytest.mark.parametrize("value", [math.nan, math.inf, "\ud800", {"\udc00": 1}])
def test_values_without_a_canonical_form_are_refused(value: Any) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the documented error
        canonical_json(value)


def test_the_deepest_body_the_parser_admits_is_canonicalised() -> None:
    levels = MAX_DEPTH // 2
    value: Any = 1
    for _ in range(levels):
        value = {"\U0001f600": [value], "\ue000": 0}

    assert canonical_json(value) == rfc8785.dumps(value)
