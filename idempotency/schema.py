"""How a command is described in the OpenAPI schema: the key, the policy, every refusal.

:func:`command_schema` is ``extend_schema`` for a command: it adds what
the idempotency layer promises of every command (the ``Idempotency-Key``
header with the policy, the ``Idempotent-Replayed`` header, the key's
refusals), so that no endpoint can forget one. Apps describe their own
answers and refusals (orders/schema.py). The policy's numbers come from
:mod:`idempotency.policy`, so the schema states the values in force.

:data:`STORED_ANSWERS` is the one list of the answers each command stores
and replays under its key: :func:`command_schema` fills it from the
answers it documents, marks each documented answer "Stored and replayed
under the key." or "Not stored: …" accordingly, and the policy's list of
replayed failures is written from it. tests/idempotency/test_stored_answers.py
holds the code to it, answer by answer.

The look-up of a key, a read rather than a command, is described at the
end (:data:`get_idempotency_key`), with examples rendered by the look-up's
own serializer.
"""

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers

from api.errors import DATABASE_RETRY_AFTER_SECONDS, InternalError, ServiceUnavailable
from api.openapi.parameters import (
    PRECONDITION_FAILED,
    REQUEST_ID,
    WWW_AUTHENTICATE,
    if_match_parameter,
    location_header,
    retry_after_header,
)
from api.openapi.problems import (
    AUTHENTICATION_FAILED,
    MALFORMED_JSON,
    NOT_ACCEPTABLE,
    NOT_AUTHENTICATED,
    PAYLOAD_TOO_LARGE,
    THROTTLED,
    UNSUPPORTED_MEDIA_TYPE,
    URI_TOO_LONG,
    Refusal,
    problem_responses,
)
from api.openapi.reads import Decorator, read_schema
from idempotency import policy, published
from idempotency.errors import (
    IdempotencyKeyConflict,
    IdempotencyKeyInProgress,
    IdempotencyKeyInvalid,
    IdempotencyKeyRequired,
    KeyQuotaExceeded,
    NoSuchIdempotencyKey,
)
from idempotency.headers import KEY_PATTERN
from idempotency.models import IdempotencyKey, StoredAnswer
from idempotency.serializers import IdempotencyKeyOutput, IdempotencyPolicyOutput

# The key every example sends; the look-up's examples (below) find it.
EXAMPLE_KEY = "7f2c6d8e-1b4a-4c1e-9f3a-2d5e8b7c9a01"


# The answers each command stores and replays under its key, by operationId:
# (status, error code), the code None for a success. command_schema fills it
# as each command's decorator is made, that is when orders/schema.py is
# imported, which the views do: the registry is complete once the URLconf is
# loaded (``django.urls.get_resolver().url_patterns``), as it is whenever
# the schema is generated or a request is served. Before that it is partial
# or empty, and the functions that read all of it refuse an empty one.
STORED_ANSWERS: dict[str, frozenset[tuple[int, str | None]]] = {}

# What a command's documented answer says of the key, appended to its text.
STORED = "Stored and replayed under the key."
NOT_STORED = "Not stored:"


def all_stored_answers() -> frozenset[tuple[int, str | None]]:
    """Every (status, code) some command stores; the registry must be filled."""
    if not STORED_ANSWERS:
        raise RuntimeError(
            "No command has registered its stored answers yet: load the URLconf "
            "(django.urls.get_resolver().url_patterns) before reading STORED_ANSWERS."
        )
    return frozenset(answer for answers in STORED_ANSWERS.values() for answer in answers)


def stored_statuses() -> list[int]:
    """The statuses some command stores and replays, ascending: successes and final failures."""
    return sorted({status for status, _ in all_stored_answers()})


def _replayed_failures(answers: Iterable[tuple[int, str | None]]) -> str:
    """``400 `ValidationError`; 409 `OrderAlreadyPaid`, `PaymentInProgress`; …``.

    By code, not only by status: a status may carry codes that are stored
    (``409 OrderAlreadyPaid``) and codes that are not (``409 IdempotencyKeyConflict``).
    """
    by_status: dict[int, set[str]] = {}
    for status, code in answers:
        if code is not None:
            by_status.setdefault(status, set()).add(code)
    if not by_status:
        raise ValueError("no stored failure to name")
    return "; ".join(
        f"{status} " + ", ".join(f"`{code}`" for code in sorted(codes))
        for status, codes in sorted(by_status.items())
    )


def policy_markdown(answers: Iterable[tuple[int, str | None]] | None = None) -> str:
    """The policy as Markdown bullets: the key parameter's description and the schema's.

    ``answers`` are the stored answers its replay bullet names: one
    command's, or by default every command's (:data:`STORED_ANSWERS`, which
    must be filled by then: :func:`all_stored_answers`).
    """
    failures = _replayed_failures(all_stored_answers() if answers is None else answers)
    return (
        f"- **Format**: 1 to {policy.MAX_KEY_LENGTH} visible ASCII characters (`!` to `~`, "
        "no space, no comma: HTTP joins a header sent twice with a comma, so the header "
        "sent twice, or a list of keys, is `400 IdempotencyKeyInvalid`), in the "
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
        "`Location`, plus `Idempotent-Replayed: true`. A command's final failures are "
        f"replayed too: {failures}. A command answered `202` replays the "
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
        "then purged; afterwards the same key is a new key.\n"
        "- **Storage**: what one principal's keys hold within the retention window (key, "
        "field digests, answer) is bounded by " + policy.storage_phrase() + "; a stored "
        "answer is at most 64 KiB, a stored refusal (4xx) at most 8 KiB. Past the bound a "
        "new key is `429 KeyQuotaExceeded` with `Retry-After`; stored keys still replay."
    )


KEY_REQUIRED = Refusal(IdempotencyKeyRequired(), "the `Idempotency-Key` header is missing.")
KEY_INVALID = Refusal(
    IdempotencyKeyInvalid(),
    f"the key is empty, longer than {policy.MAX_KEY_LENGTH} characters, not visible ASCII, "
    "has a comma, or the header was sent twice.",
)


class MismatchDetails(serializers.Serializer[Any]):
    """``details`` of a conflict with an earlier request: the key's first, or the id's order."""

    mismatch = serializers.ListField(
        child=serializers.CharField(),
        help_text=(
            "Where this request differs from the one it conflicts with, as JSON Pointers "
            "into the request (`/items/0/qty`, `/currency`) or `/method`, `/path`; never "
            "the values."
        ),
    )


KEY_CONFLICT = Refusal(
    IdempotencyKeyConflict(
        details={"mismatch": ["/items/0/qty"]}, extra={"idempotencyKey": EXAMPLE_KEY}
    ),
    "the key was used before for another request (another body, endpoint or path "
    "parameter). Nothing executes. `details.mismatch` lists what differs as JSON "
    "Pointers into the request (`/items/0/qty`, `/currency`) or `/method`, `/path`, "
    "never the values; `idempotencyKey` repeats the key.",
    members={
        "details": MismatchDetails,
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
KEY_QUOTA_EXCEEDED = Refusal(
    KeyQuotaExceeded(headers={"Retry-After": "3600"}),
    "the key is new, and the keys you stored within the retention window fill "
    f"{policy.storage_phrase()}, counting what this one could store. Nothing executes "
    "and nothing is stored; retries of your stored keys are still answered. Retry after "
    "`Retry-After` seconds, when enough of your keys have expired.",
)
COMMAND_INTERNAL_ERROR = Refusal(
    InternalError(),
    "the command's own code failed: a final answer like any other; quote the `traceId`.",
)
COMMAND_SERVICE_UNAVAILABLE = Refusal(
    ServiceUnavailable(),
    "the service's database was unreachable or failed under the command (connection "
    "lost, deadlock, serialization failure, a lock wait timed out). Retry after "
    f"`Retry-After` seconds ({DATABASE_RETRY_AFTER_SECONDS}).",
)


def _noted(refusal: Refusal, note: str) -> Refusal:
    """``refusal`` whose ``when`` ends with ``note``: whether the key keeps it."""
    return replace(refusal, when=f"{refusal.when} {note}")


def _stored(refusal: Refusal) -> Refusal:
    return _noted(refusal, STORED)


def _not_stored(refusal: Refusal, why: str) -> Refusal:
    return _noted(refusal, f"{NOT_STORED} {why}")


_BEFORE_THE_COMMAND = "answered before the command started; nothing executed."
_RETRIED_AFRESH = (
    "nothing of the command committed, the key included; a retry with the same key "
    "executes it afresh."
)

# The answers every command may give that are not the command's own: given
# before it starts (the request is refused before its key is claimed), or
# around it (the key holds another request's answer, or the database failed
# and nothing of the command committed, its claim included). None is stored
# (idempotency.commands). In the order a command's responses list them.
_ANSWERED_AROUND_THE_COMMAND = (
    _not_stored(MALFORMED_JSON, _BEFORE_THE_COMMAND),
    _not_stored(KEY_REQUIRED, _BEFORE_THE_COMMAND),
    _not_stored(KEY_INVALID, _BEFORE_THE_COMMAND),
    _not_stored(NOT_AUTHENTICATED, _BEFORE_THE_COMMAND),
    _not_stored(AUTHENTICATION_FAILED, _BEFORE_THE_COMMAND),
    _not_stored(NOT_ACCEPTABLE, _BEFORE_THE_COMMAND),
    _not_stored(KEY_CONFLICT, "the key keeps the answer of its first request."),
    _not_stored(KEY_IN_PROGRESS, "the key's answer will be its first request's."),
    _not_stored(URI_TOO_LONG, _BEFORE_THE_COMMAND),
    _not_stored(PAYLOAD_TOO_LARGE, _BEFORE_THE_COMMAND),
    _not_stored(UNSUPPORTED_MEDIA_TYPE, _BEFORE_THE_COMMAND),
    _not_stored(THROTTLED, _BEFORE_THE_COMMAND),
    _not_stored(KEY_QUOTA_EXCEEDED, _BEFORE_THE_COMMAND),
    _not_stored(
        COMMAND_SERVICE_UNAVAILABLE,
        "nothing of the command committed, the key included; a retry with the same key "
        "executes it once.",
    ),
)


# Plain form: visible ASCII but the comma, not starting with a quote (that
# would be the other form). Structured-field form (RFC 9651 String): the same
# characters in quotes, with `"` and `\` escaped by a backslash.
IDEMPOTENCY_KEY_PATTERN = (
    rf"^(?:[!#-+\--~][!-+\--~]{{0,{policy.MAX_KEY_LENGTH - 1}}}"
    rf'|"(?:[!#-+\--\[\]-~]|\\["\\]){{1,{policy.MAX_KEY_LENGTH}}}")$'
)


def _idempotency_key(answers: Iterable[tuple[int, str | None]]) -> OpenApiParameter:
    """The ``Idempotency-Key`` header of a command that stores ``answers``."""
    return OpenApiParameter(
        "Idempotency-Key",
        location=OpenApiParameter.HEADER,
        required=True,
        type=str,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description=(
            "Makes the command safe to retry: send a new key (a UUID is fine) for each new "
            "command, and the same key with the same request to retry it.\n\n"
            + policy_markdown(answers)
        ),
        examples=[OpenApiExample("A UUID", value=EXAMPLE_KEY)],
    )


def _replayed_header(answers: Iterable[tuple[int, str | None]]) -> OpenApiParameter:
    """``Idempotent-Replayed`` on the statuses of the answers a command stores, and no other."""
    return OpenApiParameter(
        "Idempotent-Replayed",
        location=OpenApiParameter.HEADER,
        response=sorted({status for status, _ in answers}),
        type=str,
        enum=["true"],
        description="Present, `true`, when the response is the replay of a completed command.",
    )


def _register(operation_id: str, answers: frozenset[tuple[int, str | None]]) -> None:
    # The same decorator made twice (a module imported anew) registers the same.
    if STORED_ANSWERS.setdefault(operation_id, answers) != answers:
        raise ValueError(f"two commands are named {operation_id!r}")


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
    if_match: str | None = None,
    examples: Sequence[OpenApiExample] = (),
    unavailable: Sequence[Refusal] = (),
) -> Decorator:
    """``extend_schema`` for a command: the key header and every answer it can give.

    ``responses`` are its successes; ``invalid`` its ``400 ValidationError``
    example; ``refusals`` its domain errors and ``404``; ``location`` the
    status answered with a ``Location`` and what that names; ``examples``
    request bodies; ``unavailable`` its own ``503 ServiceUnavailable``
    answers (our side failing for now), never stored. The successes,
    ``invalid``, ``refusals``, the ``412`` of
    ``if_match`` and the failure of the command's own code are the command's
    answers, stored and replayed under the key (:data:`STORED_ANSWERS`); the
    answers every command shares are given before or around it, and not.
    """
    # The command's own answers, its successes aside: final, so its key
    # keeps them. The one list both the registry and the documented
    # "Stored…" are made from. Beside its domain refusals, every command's
    # code may answer a stale If-Match (where it takes one) and fail itself.
    also = [*((PRECONDITION_FAILED,) if if_match is not None else ()), COMMAND_INTERNAL_ERROR]
    given = [invalid, *refusals, *also]
    own = [_stored(refusal) for refusal in refusals]
    # `invalid` first: the example of the 400 response is the command's own.
    refusal_list = [
        _stored(invalid),
        *_ANSWERED_AROUND_THE_COMMAND,
        *(_not_stored(refusal, _RETRIED_AFRESH) for refusal in unavailable),
        *own,
        *(_stored(refusal) for refusal in also),
    ]
    answers = frozenset(
        [*((status, None) for status in responses), *((r.status, r.code) for r in given)]
    )
    _register(operation_id, answers)
    statuses = [*responses, *(r.status for r in refusal_list)]
    headers = [REQUEST_ID, WWW_AUTHENTICATE, _replayed_header(answers)]
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
            **{
                status: OpenApiResponse(
                    response.response, f"{response.description} {STORED}", response.examples
                )
                for status, response in responses.items()
            },
            **problem_responses(refusal_list, operation_id=operation_id, own=own),
        },
        parameters=[
            *path_parameters,
            _idempotency_key(answers),
            *((if_match_parameter(if_match),) if if_match is not None else ()),
            *headers,
        ],
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


# --- The look-up of a key ---------------------------------------------------


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


# --- The policy as data ------------------------------------------------------

get_idempotency_policy = read_schema(
    operation_id="getIdempotencyPolicy",
    summary="Read the idempotency policy",
    description=(
        "The numbers a client needs to retry commands safely, from the running settings, "
        "and every route that requires an `Idempotency-Key` (its path template as this "
        "schema names it). It needs no token, and may be cached for its "
        "`Cache-Control: max-age`.\n\n"
        "A client never retries an intent under the same key past `retentionSeconds` after "
        "its first attempt: the key would then be a new key, and the command would execute "
        "again. Past it, reconcile from the resources, or use an id you choose "
        "(`PUT /v1/orders/{orderId}`), which never expires."
    ),
    tag="idempotency",
    response=OpenApiResponse(IdempotencyPolicyOutput, "The policy in force."),
    refusals=[],
    parameters=[
        OpenApiParameter(
            "Cache-Control",
            location=OpenApiParameter.HEADER,
            response=[200],
            required=True,
            type=str,
            description=(
                f"`public, max-age={published.MAX_AGE_SECONDS}`: how long the policy may be "
                "kept. Its numbers change only when the service restarts with other settings."
            ),
        )
    ],
    public=True,
)
