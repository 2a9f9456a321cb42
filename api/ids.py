"""Resource ids: a type prefix and 128 random bits, so they are opaque and unguessable."""

import secrets

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
# 25 base-36 characters carry 129 bits.
_LENGTH = 25
_SPACE = 36**_LENGTH


def new_id(prefix: str) -> str:
    """``prefix_`` followed by 25 random base-36 characters, e.g. ``ord_3k9…``."""
    # One draw of the system's randomness, not one per character
    # (secrets.choice): 25 draws an id were a measurable part of a first
    # execution of POST /v1/orders, which makes three (docs/SCALING.md,
    # "Where a create's Python went").
    number = secrets.randbelow(_SPACE)
    digits = []
    for _ in range(_LENGTH):
        number, digit = divmod(number, 36)
        digits.append(_ALPHABET[digit])
    return f"{prefix}_" + "".join(digits)
