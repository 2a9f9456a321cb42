"""What makes two requests "the same command".

A request is fingerprinted by its method, its path (which carries the path
parameters) and its body in the RFC 8785 canonical form, so member order,
white space and number spelling (``2`` and ``2.0``) do not matter, and any
change of a value does.

Beside the fingerprint we keep a keyed digest (HMAC) of each part of the
body, addressed by JSON Pointer. When a key is reused with another body,
comparing the digests names the parts that differ (``/items/0/qty``)
without the server storing the body, and the key (derived from
``SECRET_KEY``) keeps small values such as a quantity from being guessed
back from their digest.
"""

import hashlib
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785
from django.utils.crypto import salted_hmac

# Enough to point at every field of any command body we accept; a larger
# body is compared down to the depth the budget reaches (parents are named
# instead of their children).
MAX_FIELD_DIGESTS = 256
_DIGEST_SALT = "idempotency.field-digest"
# 64 bits tell changed fields apart; more would only grow the row.
_DIGEST_HEX_CHARS = 16


@dataclass(frozen=True)
class Fingerprint:
    digest: str
    field_digests: dict[str, str]


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 (JCS) serialisation of a parsed JSON value."""
    return rfc8785.dumps(value)


def fingerprint_request(*, method: str, path: str, body: Any) -> Fingerprint:
    """Fingerprint a command request; ``body`` is the parsed JSON."""
    digest = hashlib.sha256(canonical_json([method.upper(), path, body])).hexdigest()
    return Fingerprint(digest=digest, field_digests=_field_digests(body))


def mismatched_pointers(stored: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """JSON Pointers of the body parts whose digests differ, most specific first.

    A part that differs because one of its children differs is not listed
    beside that child. ``""`` (the whole body) is the answer when no
    narrower part can be named.
    """
    differing = {p for p in stored.keys() | current.keys() if stored.get(p) != current.get(p)}
    narrowest = [p for p in differing if not any(q.startswith(p + "/") for q in differing)]
    return sorted(narrowest) or [""]


def _field_digests(body: Any) -> dict[str, str]:
    # Breadth first, so that a budget cut keeps the outer parts of the body.
    digests: dict[str, str] = {}
    queue = deque(_children("", body))
    while queue and len(digests) < MAX_FIELD_DIGESTS:
        pointer, value = queue.popleft()
        message = pointer.encode() + b"\0" + canonical_json(value)
        digests[pointer] = salted_hmac(_DIGEST_SALT, message, algorithm="sha256").hexdigest()[
            :_DIGEST_HEX_CHARS
        ]
        queue.extend(_children(pointer, value))
    return digests


def _children(pointer: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for name in sorted(value):
            yield f"{pointer}/{_escape(name)}", value[name]
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield f"{pointer}/{index}", item


def _escape(name: str) -> str:
    # RFC 6901: "~" and "/" inside a member name.
    return name.replace("~", "~0").replace("/", "~1")
