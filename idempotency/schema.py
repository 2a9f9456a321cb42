"""How a command is described in the OpenAPI schema: the key, the policy, every refusal.

:func:`command_schema` is ``extend_schema`` for a command: it adds what
the idempotency layer promises of every command (the ``Idempotency-Key``
header with the policy, the ``Idempotent-Replayed`` header, the key's
refusals), so that no endpoint can forget one. Apps describe their own
answers and refusals (orders/schema.py). The policy's numbers come from
:mod:`idempotency.policy`, so the schema states the values in force.
"""

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers

from api.errors import DATABASE_RETRY_AFTER_SECONDS, InternalError, ServiceUnavailable
from api.openapi import (
    AUTHENTICATION_FAILED,
    MALFORMED_JSON,
    NOT_ACCEPTABLE,
    NOT_AUTHENTICATED,
    PAYLOAD_TOO_LARGE,
    REQUEST_ID,
    THROTTLED,
    UNSUPPORTED_MEDIA_TYPE,
    WWW_AUTHENTICATE,
    Decorator,
    Refusal,
    location_header,
    problem_responses,
    retry_after_header,
)
from idempotency import policy
from idempotency.errors import (
    IdempotencyKeyConflict,
    IdempotencyKeyInProgress,
    IdempotencyKeyInvalid,
    IdempotencyKeyRequired,
)

_EXAMPLE_KEY = "7f2c6d8e-1b4a-4c1e-9f3a-2d5e8b7c9a01"


def policy_markdown() -> str:
    """The policy as Markdown bullets: the key parameter's description and the schema's."""
    return (
        f"- **Format**: 1 to {policy.MAX_KEY_LENGTH} visible ASCII characters (`!` to `~`, "
        "no space), in the "
        'plain form (`7f2c…`) or the structured-field string form (`"7f2c…"`); both '
        "name the same key. Missing: `400 IdempotencyKeyRequired`; otherwise malformed: "
        "`400 IdempotencyKeyInvalid`. Neither executes nor stores anything.\n"
        "- **Scope**: (tenant, principal, key). Another principal's identical key is an "
        "unrelated key.\n"
        "- **Fingerprint**: SHA-256 of the method, the route with its path parameters "
        "and the body canonicalised by RFC 8785 (key order, white space and number "
        "spelling do not matter).\n"
        "- **Replay**: a completed key with the same fingerprint executes nothing and "
        "answers the stored response: the same status, body bytes, `Content-Type` and "
        "`Location`, plus `Idempotent-Replayed: true`. Failures are replayed too "
        "(400 `ValidationError`, 404, 409, 422, 500). A command answered `202` replays the "
        "same ids and links with its operation's *current* `status`.\n"
        "- **Conflict**: the same key with a different fingerprint executes nothing: "
        "`409 IdempotencyKeyConflict`, whose `details.mismatch` lists the differing JSON "
        "Pointers (`/items/0/qty`, `/method`, `/path`).\n"
        "- **In flight**: while the key's first request executes, a copy waits for it "
        "up to " + policy.wait_phrase() + " and gets its replay; after that, "
        "`409 IdempotencyKeyInProgress` with `Retry-After`.\n"
        "- **Not stored**: requests refused before the command starts (authentication, "
        "a missing or malformed key, malformed JSON, media type, size) store nothing; fix "
        "the request and retry with the same key. Nor does a command under which the "
        "database failed (`503 ServiceUnavailable`, with `Retry-After`): nothing of it "
        "committed, and a retry with the same key executes it once.\n"
        "- **Retention**: a completed key is kept for " + policy.retention_phrase() + ", "
        "then purged; afterwards the same key is a new key."
    )


KEY_REQUIRED = Refusal(
    IdempotencyKeyRequired(),
    "the `Idempotency-Key` header is missing. Not stored: nothing executed.",
)
KEY_INVALID = Refusal(
    IdempotencyKeyInvalid(),
    f"the key is empty, longer than {policy.MAX_KEY_LENGTH} characters or not visible ASCII. "
    "Not stored: nothing executed.",
)


class KeyConflictDetails(serializers.Serializer):
    mismatch = serializers.ListField(
        child=serializers.CharField(),
        help_text=(
            "What differs from the key's first request, as JSON Pointers into the request "
            "(`/items/0/qty`, `/currency`) or `/method`, `/path`; never the values."
        ),
    )


KEY_CONFLICT = Refusal(
    IdempotencyKeyConflict(
        details={"mismatch": ["/items/0/qty"]}, extra={"idempotencyKey": _EXAMPLE_KEY}
    ),
    "the key was used before for another request (another body, endpoint or path "
    "parameter). Nothing executes. `details.mismatch` lists what differs as JSON "
    "Pointers into the request (`/items/0/qty`, `/currency`) or `/method`, `/path`, "
    "never the values; `idempotencyKey` repeats the key.",
    members={
        "details": KeyConflictDetails,
        "idempotencyKey": partial(
            serializers.CharField,
            help_text="`IdempotencyKeyConflict` only: the key that was reused.",
        ),
    },
)
KEY_IN_PROGRESS = Refusal(
    IdempotencyKeyInProgress(headers={"Retry-After": policy.in_progress_retry_after()}),
    f"the key's first request was still executing after waiting {policy.wait_phrase()} "
    "for it. Nothing executes; retry after `Retry-After` seconds to get its replay.",
)
COMMAND_INTERNAL_ERROR = Refusal(
    InternalError(),
    "the command's own code failed: final, stored and replayed like any final answer; "
    "quote the `traceId`.",
)
COMMAND_SERVICE_UNAVAILABLE = Refusal(
    ServiceUnavailable(),
    "the service's database was unreachable or failed under the command (connection "
    "lost, deadlock, serialization failure, a lock wait timed out). Nothing was done and "
    "nothing was stored, the key included: retry after `Retry-After` seconds "
    f"({DATABASE_RETRY_AFTER_SECONDS}) with the same key and the command executes once.",
)


# Plain form: visible ASCII, not starting with a quote (that would be the
# other form). Structured-field form (RFC 9651 String): the same characters
# in quotes, with `"` and `\` escaped by a backslash.
IDEMPOTENCY_KEY_PATTERN = (
    rf"^(?:[!#-~][!-~]{{0,{policy.MAX_KEY_LENGTH - 1}}}"
    rf'|"(?:[!#-\[\]-~]|\\["\\]){{1,{policy.MAX_KEY_LENGTH}}}")$'
)

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    location=OpenApiParameter.HEADER,
    required=True,
    type=str,
    pattern=IDEMPOTENCY_KEY_PATTERN,
    description=(
        "Makes the command safe to retry: send a new key (a UUID is fine) for each new "
        "command, and the same key with the same request to retry it.\n\n" + policy_markdown()
    ),
    examples=[OpenApiExample("A UUID", value=_EXAMPLE_KEY)],
)

# Statuses a command stores and replays: its successes and final failures.
# 404 among them: a command's own refusal (cancelling an order that does not
# exist) is its final answer like a 409's.
_REPLAYABLE = (200, 201, 202, 400, 404, 409, 422, 500)


def _replayed_header(statuses: Sequence[int]) -> OpenApiParameter:
    return OpenApiParameter(
        "Idempotent-Replayed",
        location=OpenApiParameter.HEADER,
        response=[status for status in _REPLAYABLE if status in statuses],
        type=str,
        enum=["true"],
        description="Present, `true`, when the response is the replay of a completed command.",
    )


def command_schema(
    *,
    operation_id: str,
    summary: str,
    description: str,
    tag: str,
    request: Any,
    responses: Mapping[int, OpenApiResponse],
    invalid: Refusal,
    refusals: Sequence[Refusal] = (),
    location: tuple[int, str] | None = None,
    path_parameters: Sequence[OpenApiParameter] = (),
    examples: Sequence[OpenApiExample] = (),
) -> Decorator:
    """``extend_schema`` for a command: the key header and every error it can answer.

    ``invalid`` is the command's ``400 ValidationError`` example; ``refusals``
    its domain errors and ``404``; ``location`` the status answered with a
    ``Location`` and what that names; ``examples`` request bodies.
    """
    refusal_list = [
        invalid,
        MALFORMED_JSON,
        KEY_REQUIRED,
        KEY_INVALID,
        NOT_AUTHENTICATED,
        AUTHENTICATION_FAILED,
        NOT_ACCEPTABLE,
        KEY_CONFLICT,
        KEY_IN_PROGRESS,
        PAYLOAD_TOO_LARGE,
        UNSUPPORTED_MEDIA_TYPE,
        THROTTLED,
        COMMAND_INTERNAL_ERROR,
        COMMAND_SERVICE_UNAVAILABLE,
        *refusals,
    ]
    statuses = [*responses, *(r.body["status"] for r in refusal_list)]
    headers = [REQUEST_ID, WWW_AUTHENTICATE, _replayed_header(statuses)]
    if location is not None:
        headers.append(location_header(*location))
    headers.append(retry_after_header([s for s in (202, 409, 429, 503) if s in statuses]))
    return extend_schema(
        operation_id=operation_id,
        summary=summary,
        description=description,
        tags=[tag],
        request=request,
        responses={
            **responses,
            **problem_responses(refusal_list, operation_id=operation_id, own=refusals),
        },
        parameters=[*path_parameters, IDEMPOTENCY_KEY, *headers],
        examples=list(examples),
    )


def describe_policy(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A post-processing hook: the policy, with its numbers in force, in the API's description."""
    info = result.setdefault("info", {})
    info["description"] = (
        info.get("description", "").rstrip()
        + "\n\n## Idempotent commands\n"
        + "Every `POST`, `PUT`, `PATCH` and `DELETE` under `/v1/` is a command and requires "
        + "an `Idempotency-Key` header.\n\n"
        + policy_markdown()
    )
    return result
