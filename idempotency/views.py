"""The look-up of an idempotency key (docs/SPECIFICATION.md §3 rule 11): a read, not a command.

The view, and its OpenAPI description (:data:`get_idempotency_key`), with
examples rendered by the look-up's own serializer. What every command's
description shares is in idempotency/schema.py.
"""

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import principal_of
from api.openapi import Refusal, read_schema
from idempotency import policy, selectors
from idempotency.errors import NoSuchIdempotencyKey
from idempotency.headers import KEY_PATTERN
from idempotency.models import IdempotencyKey, StoredAnswer
from idempotency.schema import EXAMPLE_KEY
from idempotency.serializers import IdempotencyKeyOutput


class KeyLinksScheme(OpenApiSerializerExtension):
    """``IdempotencyKeyLinksOutput``: its members, and any other link of the stored answer.

    The links a command answered are named by the command (``operation``),
    which this generic app does not know: the rest is typed as a string map.
    """

    target_class = "idempotency.serializers.IdempotencyKeyLinksOutput"

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = super().map_serializer(auto_schema, direction)
        schema["additionalProperties"] = {
            "type": "string",
            "description": "A link of the key's stored answer, by its name there.",
        }
        return schema


_LOOKUP_TIME = datetime(2026, 11, 30, 9, 15, 2, 114000, tzinfo=UTC)


def _lookup_example(
    name: str,
    summary: str,
    *,
    key: str,
    path: str,
    status: int,
    location: str | None = None,
    links: Mapping[str, str] | None = None,
) -> OpenApiExample:
    """The look-up of a key whose stored answer had ``location`` and body ``links``.

    Rendered by the look-up's own serializer, so the example cannot drift
    from what the service answers.
    """
    record = IdempotencyKey(
        key=key,
        request_method="POST",
        request_path=path,
        created_at=_LOOKUP_TIME,
        expires_at=_LOOKUP_TIME + policy.key_ttl(),
    )
    record.answer = StoredAnswer(
        status=status,
        body=json.dumps({"links": links} if links else {}).encode(),
        headers={"Location": location} if location else {},
    )
    return OpenApiExample(
        name, summary=summary, value=IdempotencyKeyOutput(record).data, response_only=True
    )


_ORDER = "/v1/orders/ord_3k9x0c2m5q8w1e4r7t6y0u2i9"
_OPERATION = "/v1/operations/op_5h7j9l1n3p5r7t9v1x3z5b7d9"

KEY_IN_PATH = OpenApiParameter(
    "key",
    location=OpenApiParameter.PATH,
    required=True,
    type=str,
    pattern=f"^{KEY_PATTERN.pattern}$",
    description=(
        'The key itself (a key sent as the structured-field string `"7f2c"` is '
        "`7f2c`), percent-encoded as one path segment: `/`, `%`, `?` and `#` at least "
        "(`checkout/42` → `checkout%2F42`, `50%` → `50%25`). `links.self` encodes every "
        "character but `A-Z a-z 0-9 - . _ ~`, and spells the keys `.` and `..` as `%2E` and "
        "`%2E%2E`, which most HTTP clients send as they are rather than resolve away."
    ),
    examples=[
        OpenApiExample("A UUID", value=EXAMPLE_KEY),
        OpenApiExample("With a slash", value="checkout/42/pay"),
    ],
)


get_idempotency_key = read_schema(
    operation_id="getIdempotencyKey",
    summary="Look up an idempotency key",
    description=(
        "What became of one of your own keys: the method and path of its first request, "
        "when it claimed the key (`createdAt`) and when the key is forgotten "
        "(`expiresAt`), the status it earned, which every retry of it replays until then, "
        "and links to what it made (the stored `Location` as `links.location`, the stored "
        "answer's `links.self` as `links.result`, its other links by their names). Never "
        "the request's values (no body, fingerprint or digest) and not the stored answer: "
        "retry the command with its key and body to have that replayed.\n\n"
        "- **Scope**: (tenant, principal, key), as for commands. Another principal's key, "
        "in your tenant or another, is `404 NotFound`, exactly like an unknown key.\n"
        "- **Expired**: a key is kept for " + policy.retention_phrase() + "; from "
        "`expiresAt` on it is `404`, whether or not it has been purged yet.\n"
        "- **In flight**: while the key's first request is executing, the key is `404`: "
        "its claim commits with the command's effects and answer, and until then it does "
        "not exist for any other request. This read waits for nothing; ask again.\n"
        "- **Not a key**: a path segment that cannot be a key (not 1 to "
        f"{policy.MAX_KEY_LENGTH} characters `!` to `~`) is `404` too, answered without "
        "a look-up.\n"
        "- A read: it needs no `Idempotency-Key`, and executes, replays, extends and "
        "blocks nothing."
    ),
    tag="idempotency",
    response=OpenApiResponse(
        IdempotencyKeyOutput,
        "The key: its first request and where its answer leads.",
        examples=[
            _lookup_example(
                "An order placed",
                "A key that placed an order",
                key=EXAMPLE_KEY,
                path="/v1/orders",
                status=201,
                location=_ORDER,
                links={"self": _ORDER},
            ),
            _lookup_example(
                "A payment accepted",
                "A key that started a payment: the operation to poll, and the payment",
                key="checkout/42/pay",
                path="/v1/payments",
                status=202,
                location=_OPERATION,
                links={
                    "self": "/v1/payments/pay_8d2k4n6p0r1t3v5x7z9b2c4e6",
                    "operation": _OPERATION,
                },
            ),
            _lookup_example(
                "A validation error",
                "A key whose request failed validation: a final answer, with no links",
                key="retry-me-7",
                path="/v1/orders",
                status=400,
            ),
        ],
    ),
    refusals=[
        Refusal(
            NoSuchIdempotencyKey(),
            "no completed, unexpired key of yours by that name: unknown, another "
            "principal's (in your tenant or another), expired (purged or not), its first "
            "request still executing, or a segment that cannot be a key.",
        )
    ],
    parameters=[KEY_IN_PATH],
)


class IdempotencyKeyDetail(APIView):
    @get_idempotency_key
    def get(self, request: Request, key: str) -> Response:
        record = selectors.get_idempotency_key(principal=principal_of(request), key=key)
        return Response(IdempotencyKeyOutput(record).data)
