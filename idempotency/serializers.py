"""The look-up of an idempotency key (docs/SPECIFICATION.md §3 rule 11), as the API renders it.

It shows what the key's first request was (method and path), when, the
status it earned and where its answer leads, and nothing of the request's
values. The links are read from the stored answer itself, its ``Location``
header and its body's ``links``, so that this generic app learns what a
command made without knowing any command.
"""

import json
from typing import Any
from urllib.parse import quote

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from idempotency.models import IdempotencyKey

# The look-up's own links beside `self` (the stored answer's `self` is shown
# as `result`): a stored link by one of these names is left out rather than
# let replace them.
_OWN_LINKS = ("location", "result")


def key_path(key: str) -> str:
    """``/v1/idempotency-keys/a%2Fb``: the look-up of ``key``, the key percent-encoded.

    Every character but ``A-Z a-z 0-9 - . _ ~`` is encoded, ``/`` included,
    so the key stays one path segment.
    """
    segment = quote(key, safe="")
    if segment in (".", ".."):
        # HTTP clients (curl, urllib3, httpx) resolve a literal dot segment
        # away before sending the path; its percent-encoded spelling survives.
        segment = segment.replace(".", "%2E")
    return f"/v1/idempotency-keys/{segment}"


def answer_links(record: IdempotencyKey) -> dict[str, str | None]:
    """Where the key's stored answer leads, read from the answer alone.

    ``location`` is its ``Location`` header; ``result`` its body's
    ``links.self`` (what the command is about); every other string member of
    its body's ``links`` keeps its name. An answer without them (an error)
    leads nowhere: ``location`` and ``result`` are ``None``.
    """
    links: dict[str, str | None] = {
        "location": record.answer.headers.get("Location"),
        "result": None,
    }
    for name, value in _body_links(bytes(record.answer.body)).items():
        if name == "self":
            links["result"] = value
        elif name not in _OWN_LINKS:
            links[name] = value
    return links


def _body_links(body: bytes) -> dict[str, str]:
    try:
        answer = json.loads(body)
    except ValueError:
        # Every command answers JSON, but the look-up has no reason to fail
        # on an answer that is not: it has no links to show.
        return {}
    links = answer.get("links") if isinstance(answer, dict) else None
    if not isinstance(links, dict):
        return {}
    return {name: value for name, value in links.items() if isinstance(value, str)}


class IdempotencyKeyLinksOutput(serializers.Serializer[Any]):
    """Where the key leads: reads of what its command made, never a replay of it.

    Any other member is a link of the key's stored answer, by its name there
    (for a payment, `operation`: the operation to poll).
    """

    self = serializers.CharField(help_text="This look-up, the key percent-encoded.")
    location = serializers.CharField(
        allow_null=True,
        help_text=(
            "The `Location` the key's answer carried: what the command made (the order) or "
            "the operation to poll (a payment, a refund); `null` when the answer had none "
            "(errors)."
        ),
    )
    result = serializers.CharField(
        allow_null=True,
        help_text=(
            "`links.self` of the key's answer: what the command is about (the order, the "
            "payment); `null` when the answer had none (errors)."
        ),
    )


class IdempotencyKeyOutput(serializers.Serializer[IdempotencyKey]):
    """What became of one of the caller's idempotency keys; never the request's values."""

    key = serializers.CharField(help_text="The key, in its plain form.")
    method = serializers.CharField(
        source="request_method", help_text="The method of the key's first request."
    )
    path = serializers.CharField(
        source="request_path", help_text="The path of the key's first request, `/v1/…`."
    )
    status = serializers.IntegerField(
        source="answer.status",
        help_text=(
            "The HTTP status the key's first request was answered with, which every retry "
            "of that request gets until `expiresAt`: a success or a final failure (`400`, "
            "`404`, `409`, `422`, `500`)."
        ),
    )
    createdAt = serializers.DateTimeField(
        source="created_at", help_text="When the key's first request claimed it."
    )
    expiresAt = serializers.DateTimeField(
        source="expires_at",
        help_text="When the key is forgotten: from then on it is `404` here, and a new key.",
    )
    links = serializers.SerializerMethodField()

    @extend_schema_field(IdempotencyKeyLinksOutput)
    def get_links(self, record: IdempotencyKey) -> dict[str, str | None]:
        return {"self": key_path(record.key), **answer_links(record)}


class FingerprintPolicyOutput(serializers.Serializer[Any]):
    """How a request's fingerprint is made: what makes a retry "the same request"."""

    canonicalization = serializers.CharField(
        help_text="How the JSON body is put in one form before hashing: `RFC 8785`."
    )
    hash = serializers.CharField(help_text="The digest: `SHA-256`.")
    covers = serializers.ListField(
        child=serializers.CharField(),
        help_text=(
            "What the fingerprint covers: `method`, `path` (with its parameters) and `body`; "
            "headers and the media type's parameters are not part of it."
        ),
    )


class CommandRouteOutput(serializers.Serializer[Any]):
    """A route that requires an `Idempotency-Key`."""

    method = serializers.CharField(help_text="`POST`, `PUT`, `PATCH` or `DELETE`.")
    path = serializers.CharField(
        help_text="The route as this schema names it: `/v1/orders/{orderId}/cancel`."
    )


class IdempotencyPolicyOutput(serializers.Serializer[Any]):
    """The numbers a client needs to retry safely, from the running settings."""

    header = serializers.CharField(help_text="The header that carries the key.")
    keyMaxLength = serializers.IntegerField(
        help_text="The longest key, in characters (visible ASCII `!` to `~` but the comma)."
    )
    retentionSeconds = serializers.IntegerField(
        help_text=(
            "How long a completed key is kept and replayed, from its first request "
            "(`IDEMPOTENCY_KEY_TTL`). Never retry under a key past it: the key would then be "
            "a new key, and the command would execute again."
        )
    )
    waitSeconds = serializers.FloatField(
        help_text=(
            "How long a copy of a command still executing waits for it before "
            "`409 IdempotencyKeyInProgress` (`IDEMPOTENCY_WAIT`)."
        )
    )
    lockTimeoutSeconds = serializers.FloatField(
        help_text=(
            "How long one statement of a command, or one pause between two, may last before "
            "the database ends the command's transaction and frees its key "
            "(`IDEMPOTENCY_LOCK_TIMEOUT`): the key of a hung process is free again within "
            "it, that of a dead process at once."
        )
    )
    storagePerPrincipalBytes = serializers.IntegerField(
        help_text=(
            "The most one principal's stored keys may hold within the retention "
            "(`IDEMPOTENCY_STORAGE_PER_PRINCIPAL`); past it, a new key is "
            "`429 KeyQuotaExceeded`."
        )
    )
    fingerprint = FingerprintPolicyOutput()
    commands = CommandRouteOutput(
        many=True, help_text="Every route that requires the key, sorted by path template."
    )
