"""Resource ids: a type prefix and 128 random bits, so they are opaque and unguessable."""

import secrets

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
# 25 base-36 characters carry 129 bits.
_LENGTH = 25


def new_id(prefix: str) -> str:
    """``prefix_`` followed by 25 random base-36 characters, e.g. ``ord_3k9…``."""
    return f"{prefix}_" + "".join(secrets.choice(_ALPHABET) for _ in range(_LENGTH))
