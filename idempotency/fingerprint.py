"""What makes two requests "the same command".

A request is fingerprinted by its method, its path (which carries the path
parameters) and its body in the RFC 8785 canonical form, so member order,
white space and number spelling (``2`` and ``2.0``) do not matter, and any
change of a value does.

Beside the fingerprint we keep a keyed digest (HMAC) of parts of the body,
addressed by JSON Pointer. When a key is reused with another body,
comparing the digests names the parts that differ (``/items/0/qty``)
without the server storing the body, and the key (derived from
``SECRET_KEY``) keeps small values such as a quantity from being guessed
back from their digest.

Both cost time linear in the size of the body, whatever its shape, because
a hostile client chooses the shape: the fingerprint is one canonical pass
over the request, and the field digests are a Merkle tree (each part is
hashed with its chosen children replaced by their digests, so no byte of
the body is canonicalised twice). The digests are computed only when they
are needed: when a key is claimed, and when a conflict must name its
differences; a replay needs the fingerprint alone.
"""

import functools
import hashlib
import heapq
import hmac
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from typing import Any

from django.conf import settings

from idempotency.canonical import canonical_json

# What the fingerprint is, as the published policy states it (§3 rule 15):
# the three parts fingerprint_request hashes, and how.
CANONICALIZATION = "RFC 8785"
HASH = "SHA-256"
COVERS = ("method", "path", "body")

# Enough to point at every field of a payment (4 parts) and of an order of up
# to 76 lines; an order of 100 lines has 303 parts (3 members, 100 lines, 200
# fields). A larger body is compared down to the parts the budget reaches,
# breadth first, so a parent is named instead of its children: a change from
# the 77th line on is named at its line (decision 0005).
MAX_FIELD_DIGESTS = 256
# Pointers are stored with the key: a part whose pointer is longer (a
# member name no command has) is named by its parent.
MAX_POINTER_LENGTH = 128
# And the stored digests are bounded in bytes (idempotency/quota.py counts
# them against the principal's storage): 256 pointers of 128 characters
# would be 40 KB a key. Those of an order of 100 lines take 9 KB; a body
# whose parts need more is compared down to the parts that fit, breadth
# first, as for the count.
MAX_FIELD_DIGEST_BYTES = 12 * 1024
_DIGEST_SALT = "idempotency.field-digest"
# 64 bits tell changed fields apart; more would only grow the row.
_DIGEST_HEX_CHARS = 16
# What a part costs in the stored digests besides its pointer: its digest,
# and jsonb's entry headers for the member and its value.
_PART_OVERHEAD_BYTES = _DIGEST_HEX_CHARS + 8


@dataclass(frozen=True)
class Fingerprint:
    """The SHA-256 of a command request, and keyed digests of its body's parts."""

    digest: str
    body: Any = field(compare=False, repr=False)

    @cached_property
    def field_digests(self) -> dict[str, str]:
        """JSON Pointer → keyed digest of that part of the body."""
        return _field_digests(self.body)


def fingerprint_request(*, method: str, path: str, body: Any) -> Fingerprint:
    """Fingerprint a command request; ``body`` is the parsed JSON.

    :raises ValueError: the body has no RFC 8785 form.
    """
    digest = hashlib.sha256(canonical_json([method.upper(), path, body])).hexdigest()
    return Fingerprint(digest=digest, body=body)


def field_digests_bytes(digests: Mapping[str, str]) -> int:
    """The bytes the stored digests take, as ``MAX_FIELD_DIGEST_BYTES`` counts them."""
    return sum(_part_bytes(pointer) for pointer in digests)


def _part_bytes(pointer: str) -> int:
    return len(pointer.encode()) + _PART_OVERHEAD_BYTES


def mismatched_pointers(stored: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """JSON Pointers of the body parts whose digests differ, most specific first.

    A part that differs because one of its children differs is not listed
    beside that child. ``""`` (the whole body) is the answer when no
    narrower part can be named.
    """
    differing = {p for p in stored.keys() | current.keys() if stored.get(p) != current.get(p)}
    parents = {ancestor for pointer in differing for ancestor in _ancestors(pointer)}
    return sorted(differing - parents) or [""]


def _ancestors(pointer: str) -> Iterator[str]:
    """``/a/b/c`` → ``/a/b``, ``/a`` (the whole body, ``""``, is not a stored part)."""
    end = pointer.rfind("/")
    while end > 0:
        yield pointer[:end]
        end = pointer.rfind("/", 0, end)


@dataclass(slots=True)
class _Part:
    pointer: str
    value: Any
    # Where the part sits in its parent: a member name or an index.
    slot: str | int
    digested_children: "list[_Part]"
    digest: str = ""


def _field_digests(body: Any) -> dict[str, str]:
    keyed = _keyed_hmac(settings.SECRET_KEY)
    every_part = _digest_every_part(body, keyed)
    return every_part if every_part is not None else _digest_chosen_parts(body, keyed)


def _digest_chosen_parts(body: Any, keyed: "hmac.HMAC") -> dict[str, str]:
    parts = _choose_parts(body)
    # Children before parents: each part's digest covers its children's.
    for part in reversed(parts):
        part.digest = _digest_of(part, keyed)
    return {part.pointer: part.digest for part in parts}


class _OverBudget(Exception):
    """The body has a part past the budget or a pointer past its limit."""


def _digest_every_part(body: Any, keyed: "hmac.HMAC") -> dict[str, str] | None:
    """The digests of a body within the budget, in one walk; None for any other body.

    Every command body the service accepts has at most MAX_FIELD_DIGESTS
    parts, each with a pointer of at most MAX_POINTER_LENGTH characters, so
    that every part is digested: one depth-first walk then computes each
    part's digest straight from its children's, with no list of parts to
    choose first. It gives up as soon as a part is past the budget or a
    pointer past its limit, having done at most the budget's work, and the
    caller chooses parts breadth first. The digests are the same either way
    (tests/idempotency/test_fingerprint_properties.py).
    """
    digests: dict[str, str] = {}
    if isinstance(body, dict | list):
        try:
            _walk(body, "", keyed, _Digests(digests))
        except _OverBudget:
            return None
    return digests


@dataclass(slots=True)
class _Digests:
    """The digests one walk has made so far, and the bytes they take."""

    by_pointer: dict[str, str]
    bytes: int = 0


def _walk(container: Any, pointer: str, keyed: "hmac.HMAC", digests: _Digests) -> Any:
    """A copy of ``container`` with each child replaced by its digest, put in ``digests``."""
    if isinstance(container, dict):
        if len(container) > MAX_FIELD_DIGESTS:
            raise _OverBudget()
        return {
            name: _digest(container[name], f"{pointer}/{_escape(name)}", keyed, digests)
            for name in container
        }
    return [
        _digest(child, f"{pointer}/{index}", keyed, digests)
        for index, child in enumerate(container)
    ]


def _digest(value: Any, pointer: str, keyed: "hmac.HMAC", digests: _Digests) -> str:
    digests.bytes += _part_bytes(pointer)
    if (
        len(pointer) > MAX_POINTER_LENGTH
        or len(digests.by_pointer) >= MAX_FIELD_DIGESTS
        or digests.bytes > MAX_FIELD_DIGEST_BYTES
    ):
        raise _OverBudget()
    # The part counts against the budget before its children do.
    digests.by_pointer[pointer] = ""
    if isinstance(value, dict | list):
        value = _walk(value, pointer, keyed, digests)
    digest = keyed.copy()
    digest.update(pointer.encode() + b"\0" + canonical_json(value))
    digests.by_pointer[pointer] = hexdigest = digest.hexdigest()[:_DIGEST_HEX_CHARS]
    return hexdigest


def _choose_parts(body: Any) -> list[_Part]:
    """The parts that get a digest: breadth first, so a budget cut keeps the outer ones."""
    root = _Part(pointer="", value=body, slot="", digested_children=[])
    chosen: list[_Part] = []
    spent = 0
    queue = deque([root])
    while queue and len(chosen) < MAX_FIELD_DIGESTS:
        parent = queue.popleft()
        if len(parent.pointer) + 2 > MAX_POINTER_LENGTH:
            continue  # no child's pointer can fit
        budget = MAX_FIELD_DIGESTS - len(chosen)
        for slot, value in islice(_children(parent.value), budget):
            pointer = f"{parent.pointer}/{_escape(slot) if isinstance(slot, str) else slot}"
            if len(pointer) > MAX_POINTER_LENGTH:
                continue
            spent += _part_bytes(pointer)
            if spent > MAX_FIELD_DIGEST_BYTES:
                # The bytes are spent: no later part, of this parent or
                # another, is digested (its parent's digest covers it).
                queue.clear()
                break
            part = _Part(pointer=pointer, value=value, slot=slot, digested_children=[])
            chosen.append(part)
            if isinstance(value, dict | list):
                queue.append(part)
            if parent is not root:
                parent.digested_children.append(part)
    return chosen


def _children(value: Any) -> Iterable[tuple[str | int, Any]]:
    """A container's children in canonical order; an array's are taken lazily."""
    if isinstance(value, dict):
        # nsmallest sorts only what the budget can take of a huge object.
        names = (
            sorted(value)
            if len(value) <= MAX_FIELD_DIGESTS
            else heapq.nsmallest(MAX_FIELD_DIGESTS, value)
        )
        return [(name, value[name]) for name in names]
    if isinstance(value, list):
        return enumerate(value)
    return ()


def _digest_of(part: _Part, keyed: "hmac.HMAC") -> str:
    value = part.value
    if part.digested_children:
        # A shallow copy with each digested child replaced by its digest: the
        # child's bytes were hashed into that digest already. A client could
        # only forge a collision by guessing a keyed digest.
        copy: Any = dict(value) if isinstance(value, dict) else list(value)
        for child in part.digested_children:
            copy[child.slot] = child.digest
        value = copy
    digest = keyed.copy()
    digest.update(part.pointer.encode() + b"\0" + canonical_json(value))
    return digest.hexdigest()[:_DIGEST_HEX_CHARS]


@functools.cache
def _keyed_hmac(secret: str) -> "hmac.HMAC":
    """The field digests' HMAC, keyed and fed nothing yet: copied for each part.

    Its key is ``salted_hmac``'s derivation (a SHA-256 of the salt and
    ``SECRET_KEY``), so the digests are the ones ``salted_hmac(_DIGEST_SALT,
    …)`` makes and keys stored before stay comparable. Every part of every
    claimed body is digested: the derivation and the keying, which costs
    as much as the digest of a small part (OpenSSL looks its algorithm up
    anew each time), are done once per secret; a copy costs neither.
    """
    key = hashlib.sha256((_DIGEST_SALT + secret).encode()).digest()
    return hmac.new(key, digestmod=hashlib.sha256)


def _escape(name: str) -> str:
    # RFC 6901: "~" and "/" inside a member name.
    return name.replace("~", "~0").replace("/", "~1")
