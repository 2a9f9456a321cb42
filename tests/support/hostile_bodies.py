"""Request bodies shaped to cost the server, for the tests and ``make bench``."""

import json
from collections.abc import Callable

from api.parsers import MAX_DEPTH
from tests.support.http import ORDER


def nested(depth: int, payload: str) -> str:
    return "[" * depth + payload + "]" * depth


def numbers(n: int, spelling: str = "1.5") -> str:
    return ",".join([spelling] * n)


# Body text of about ``size`` bytes, for each shape. Depths grow with the
# size up to the parser's limit, so that work proportional to depth times
# size would show.
SHAPES: dict[str, Callable[[int], str]] = {
    "deep arrays around many numbers": lambda size: (
        json.dumps(ORDER)[:-1]
        + ',"x":'
        + nested(min(size // 3000, MAX_DEPTH - 2), numbers(size // 4))
        + "}"
    ),
    "a chain of objects": lambda size: (
        '{"a":' * min(size // 3000, MAX_DEPTH - 1)
        + f"[{numbers(size // 2, '7')}]"
        + "}" * min(size // 3000, MAX_DEPTH - 1)
    ),
    "one wide object": lambda size: "{" + ",".join(f'"m{i}":{i}' for i in range(size // 16)) + "}",
    "long member names": lambda size: (
        "{" + ",".join(f'"{i:0200d}":0' for i in range(size // 205)) + "}"
    ),
    "many small arrays": lambda size: "[" + ",".join(["[[1],{}]"] * (size // 9)) + "]",
    "numbers spelled otherwise in RFC 8785": lambda size: (
        "[" + ",".join(f"{i}e-7,{i}e+17,{i}.0" for i in range(1, size // 30)) + "]"
    ),
}
