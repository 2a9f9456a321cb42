"""The OpenAPI description of the API: the pieces every endpoint shares.

Views describe themselves with :func:`command_schema` and :func:`read_schema`,
which add what the contract promises of every command or read (the
``Idempotency-Key`` header, the problem body, every error status and the
response headers), so that no endpoint can forget one. The examples of
error bodies are rendered by :func:`config.exceptions.render_exception`
itself, so they cannot drift from what the service answers.

This module also teaches drf-spectacular about our bearer tokens and strict
serializers, and its post-processing hooks name path parameters in the
contract's camelCase, mark every member of a response body required and add
the links between operations.
"""

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerExtension,
)
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import exceptions as drf
from rest_framework import serializers

from config.exceptions import PROBLEM_CONTENT_TYPE, InternalError, PayloadTooLarge, render_exception
from config.pagination import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    MIN_PAGE_SIZE,
    InvalidListQuery,
)
from idempotency.errors import (
    IdempotencyKeyConflict,
    IdempotencyKeyInProgress,
    IdempotencyKeyInvalid,
    IdempotencyKeyRequired,
)

# --- Authentication and strict input ----------------------------------------


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer <token>`` (accounts.authentication)."""

    target_class = "accounts.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {
            **build_bearer_security_scheme_object(
                header_name="Authorization",
                token_prefix="Bearer",  # noqa: S106 - a scheme name
            ),
            "description": (
                "An API token from `python manage.py create_api_client TENANT NAME`. "
                "No header: `401 NotAuthenticated`; an unknown, revoked or malformed "
                "one: `401 AuthenticationFailed`."
            ),
        }


class StrictSerializerScheme(OpenApiSerializerExtension):
    """Input serializers, described as strictly as they validate.

    Without these constraints a client generated from the schema (or a
    fuzzer) would believe that requests the service refuses are valid.
    """

    target_class = "config.fields.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        serializer = self.target
        schema: dict[str, Any] = auto_schema._map_basic_serializer(serializer, direction)
        # StrictSerializer refuses members it does not know.
        schema["additionalProperties"] = False
        # Its docstring describes the base class, not this payload.
        if not type(serializer).__dict__.get("__doc__"):
            schema.pop("description", None)
        for name, field in serializer.fields.items():
            prop = schema["properties"].get(name)
            if prop is None:
                continue
            if isinstance(field, serializers.ListSerializer):
                _constrain_list(field, prop)
            elif isinstance(field, serializers.IntegerField):
                _constrain_integer(prop)
            elif isinstance(field, serializers.CharField) and not isinstance(
                field, serializers.RegexField
            ):
                schema["properties"][name] = _constrain_string(field, prop)
        return schema


def _constrain_list(field: serializers.ListSerializer, prop: dict[str, Any]) -> None:
    # drf-spectacular reads neither allow_empty nor the length bounds of a
    # nested list (which DRF's stubs do not declare either).
    min_length: int | None = getattr(field, "min_length", None)
    max_length: int | None = getattr(field, "max_length", None)
    min_items = min_length or (0 if field.allow_empty else 1)
    if min_items:
        prop["minItems"] = min_items
    if max_length is not None:
        prop["maxItems"] = max_length


# config.parsers refuses any integer a double cannot hold exactly (I-JSON).
MAX_SAFE_INTEGER = 2**53 - 1


def _constrain_integer(prop: dict[str, Any]) -> None:
    prop["maximum"] = min(prop.get("maximum", MAX_SAFE_INTEGER), MAX_SAFE_INTEGER)
    prop["minimum"] = max(prop.get("minimum", -MAX_SAFE_INTEGER), -MAX_SAFE_INTEGER)


# DRF's CharField refuses NUL characters, and trims white space (what
# str.strip() removes) before it checks that a required string is not blank:
# the patterns say the same. The white space is spelled out because \s of a
# JSON Schema (ECMA 262) pattern is not Python's: it lacks U+001C-U+001F and
# U+0085, which generated clients and fuzzers would then send as text.
PYTHON_WHITESPACE = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_NO_NUL = r"^[^\x00]*$"
_NOT_BLANK = rf"^[^\x00]*[^\x00{PYTHON_WHITESPACE}][^\x00]*$"


def _constrain_string(field: serializers.CharField, prop: dict[str, Any]) -> dict[str, Any]:
    if not field.allow_blank:
        return {**prop, "pattern": _NOT_BLANK}
    # drf-spectacular writes an optional blank as oneOf(string, empty string);
    # "" matches both branches once the string has a pattern, which oneOf
    # forbids, so the pattern (which admits "") replaces the pair.
    branches = prop.pop("oneOf", None)
    return {**(branches[0] if branches else {}), **prop, "pattern": _NO_NUL}


# --- The problem body ------------------------------------------------------


class Problem(serializers.Serializer):
    """An error: RFC 9457 problem details plus the service's own members.

    Served as ``application/problem+json``. ``error`` is the stable code to
    branch on; ``message`` is for people and may change.
    """

    type = serializers.CharField(help_text="`urn:order-service:problem:<error>`.")
    title = serializers.CharField(help_text="A short summary of the error code.")
    status = serializers.IntegerField(help_text="The HTTP status code.")
    error = serializers.CharField(help_text="The stable machine code, PascalCase.")
    message = serializers.CharField(help_text="What went wrong, for people.")
    traceId = serializers.CharField(  # noqa: N815 - the wire name
        help_text="The request's `X-Request-ID`; quote it when reporting a problem."
    )
    details = serializers.DictField(
        required=False,
        help_text=(
            "Specifics of the error: field → messages for `ValidationError`, "
            "`mismatch` (JSON Pointers) for `IdempotencyKeyConflict`, the facts "
            "behind a business rejection."
        ),
    )
    idempotencyKey = serializers.CharField(  # noqa: N815
        required=False, help_text="`IdempotencyKeyConflict` only: the key that was reused."
    )


_EXAMPLE_TRACE_ID = "6f1c2a9e0b7d4c35a8e2f41d9b0c7e12"
_EXAMPLE_KEY = "7f2c6d8e-1b4a-4c1e-9f3a-2d5e8b7c9a01"


def _rendered(error: BaseException) -> dict[str, Any]:
    """The body the service answers for ``error``, with a fixed trace id."""
    body: dict[str, Any] = json.loads(render_exception(error).content)
    body["traceId"] = _EXAMPLE_TRACE_ID
    return body


@dataclass(frozen=True)
class Refusal:
    """An error an endpoint may answer: an instance to render, and when it happens."""

    error: BaseException
    when: str

    @cached_property
    def body(self) -> dict[str, Any]:
        return _rendered(self.error)


MALFORMED_JSON = Refusal(
    drf.ParseError("The body is not valid JSON: Expecting value (line 1, column 1)."),
    "the body is not JSON, or not I-JSON (RFC 7493: UTF-8, unique member names, "
    "integers within ±(2^53 - 1), numbers within the range of a double, no lone "
    "surrogates), its arrays and objects nest deeper than 256 levels, a member name "
    "holds U+0000, or the body ended before its `Content-Length`. Not stored: nothing "
    "executed.",
)
KEY_REQUIRED = Refusal(
    IdempotencyKeyRequired(),
    "the `Idempotency-Key` header is missing. Not stored: nothing executed.",
)
KEY_INVALID = Refusal(
    IdempotencyKeyInvalid(),
    "the key is empty, longer than 255 characters or not visible ASCII. "
    "Not stored: nothing executed.",
)
NOT_AUTHENTICATED = Refusal(
    drf.NotAuthenticated(), "no `Authorization` header. Never stored: a retry with a token runs."
)
AUTHENTICATION_FAILED = Refusal(
    drf.AuthenticationFailed("Unknown or revoked API token."),
    "the token is unknown, revoked or not a well-formed bearer token.",
)
NOT_ACCEPTABLE = Refusal(
    drf.NotAcceptable("Could not satisfy the request Accept header."),
    "the `Accept` header excludes `application/json`.",
)
UNSUPPORTED_MEDIA_TYPE = Refusal(
    drf.UnsupportedMediaType("text/plain"),
    "a body whose `Content-Type` is not `application/json`. Not stored.",
)
PAYLOAD_TOO_LARGE = Refusal(
    PayloadTooLarge(),
    "the body is over 1 MiB, whether sent with a `Content-Length` or chunked. Not stored.",
)
KEY_CONFLICT = Refusal(
    IdempotencyKeyConflict(
        details={"mismatch": ["/items/0/qty"]}, extra={"idempotencyKey": _EXAMPLE_KEY}
    ),
    "the key was used before for another request (another body, endpoint or path "
    "parameter). Nothing executes. `details.mismatch` lists what differs as JSON "
    "Pointers into the request (`/items/0/qty`, `/currency`) or `/method`, `/path`, "
    "never the values; `idempotencyKey` repeats the key.",
)
KEY_IN_PROGRESS = Refusal(
    IdempotencyKeyInProgress(headers={"Retry-After": "2"}),
    "the key's first request was still executing after waiting `IDEMPOTENCY_WAIT` "
    "(default 2 s) for it. Nothing executes; retry after `Retry-After` seconds to get "
    "its replay.",
)
THROTTLED = Refusal(
    drf.Throttled(wait=29),
    "over the principal's rate limit. Only when the deployment sets "
    "`API_THROTTLE_RATE` (off by default). Not stored.",
)
INTERNAL_ERROR = Refusal(
    InternalError(),
    "the service failed. For a command whose own code failed this is final and "
    "replayed; if the database failed under it, nothing was stored and a retry "
    "executes it once.",
)


def not_found(resource: str, example_id: str) -> Refusal:
    """``404 NotFound`` for a path id: missing, or another tenant's."""
    return Refusal(
        drf.NotFound(f"No {resource} {example_id}."),
        f"no such {resource} in your tenant (another tenant's is answered alike).",
    )


def validation_error(serializer_class: type[serializers.Serializer], body: Any) -> Refusal:
    """``400 ValidationError``, with the ``details`` the serializer gives ``body``."""
    serializer = serializer_class(data=body)
    if serializer.is_valid():
        raise ValueError(f"{body!r} is a valid {serializer_class.__name__}")
    return Refusal(
        drf.ValidationError(serializer.errors),
        "a well-formed body that fails validation; `details` maps each field to its "
        "messages. A final outcome of the command: stored and replayed.",
    )


# --- Parameters and response headers ---------------------------------------

# Plain form: visible ASCII, not starting with a quote (that would be the
# other form). Structured-field form (RFC 9651 String): the same characters
# in quotes, with `"` and `\` escaped by a backslash.
IDEMPOTENCY_KEY_PATTERN = r'^(?:[!#-~][!-~]{0,254}|"(?:[!#-\[\]-~]|\\["\\]){1,255}")$'

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    location=OpenApiParameter.HEADER,
    required=True,
    type=str,
    pattern=IDEMPOTENCY_KEY_PATTERN,
    description=(
        "Makes the command safe to retry: send a new key (a UUID is fine) for each new "
        "command, and the same key with the same request to retry it.\n\n"
        "- **Format**: 1 to 255 visible ASCII characters (`!` to `~`, no space), in the "
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
        "(400 `ValidationError`, 409, 422, 500). A command answered `202` replays the "
        "same ids and links with its operation's *current* `status`.\n"
        "- **Conflict**: the same key with a different fingerprint executes nothing: "
        "`409 IdempotencyKeyConflict`, whose `details.mismatch` lists the differing JSON "
        "Pointers (`/items/0/qty`, `/method`, `/path`).\n"
        "- **In flight**: while the key's first request executes, a copy waits for it "
        "up to `IDEMPOTENCY_WAIT` (default 2 s) and gets its replay; after that, "
        "`409 IdempotencyKeyInProgress` with `Retry-After`.\n"
        "- **Retention**: a completed key is kept for `IDEMPOTENCY_KEY_TTL` seconds "
        "(default 86400, 24 h), then purged; afterwards the same key is a new key."
    ),
    examples=[OpenApiExample("A UUID", value=_EXAMPLE_KEY)],
)

REQUEST_ID = OpenApiParameter(
    "X-Request-ID",
    location=OpenApiParameter.HEADER,
    response=True,
    required=True,
    type=str,
    description=(
        "The request's id: the client's own `X-Request-ID` when it is 1-128 characters "
        "of `A-Za-z0-9._:@-`, a generated one otherwise. It is the `traceId` of errors "
        "and logs."
    ),
)
# Statuses a command stores and replays: its successes and final failures.
_REPLAYABLE = (200, 201, 202, 400, 409, 422, 500)


def _replayed_header(statuses: Sequence[int]) -> OpenApiParameter:
    return OpenApiParameter(
        "Idempotent-Replayed",
        location=OpenApiParameter.HEADER,
        response=[status for status in _REPLAYABLE if status in statuses],
        type=str,
        enum=["true"],
        description="Present, `true`, when the response is the replay of a completed command.",
    )


def _location_header(status: int, what: str) -> OpenApiParameter:
    return OpenApiParameter(
        "Location",
        location=OpenApiParameter.HEADER,
        response=[status],
        required=True,
        type=str,
        description=f"Path-absolute URL of {what}.",
    )


def _retry_after_header(statuses: Sequence[int]) -> OpenApiParameter:
    return OpenApiParameter(
        "Retry-After",
        location=OpenApiParameter.HEADER,
        response=list(statuses),
        type=int,
        description=(
            "Seconds to wait before asking again: while an operation is processing (202 "
            "and the operation), for `IdempotencyKeyInProgress` (409) and `Throttled` (429)."
        ),
    )


WWW_AUTHENTICATE = OpenApiParameter(
    "WWW-Authenticate",
    location=OpenApiParameter.HEADER,
    response=[401],
    required=True,
    type=str,
    description='`Bearer realm="order-service"`.',
)


def path_id(name: str, prefix: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        location=OpenApiParameter.PATH,
        required=True,
        type=str,
        description=f"An opaque id, `{prefix}_…`.",
    )


CURSOR = OpenApiParameter(
    "cursor",
    type=str,
    description=(
        "Opaque and signed: take it from the `next` or `previous` link. One this service "
        "did not issue (or issued under another `SECRET_KEY`) is `400 ValidationError`; "
        "start again without a cursor."
    ),
)
PAGE_SIZE = OpenApiParameter(
    "pageSize",
    type={"type": "integer", "minimum": MIN_PAGE_SIZE, "maximum": MAX_PAGE_SIZE},
    description=(
        f"Results per page: an integer from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}, default "
        f"{DEFAULT_PAGE_SIZE}. Anything else is `400 ValidationError`, never quietly replaced."
    ),
    examples=[OpenApiExample("Twenty", value=20)],
)
INVALID_LIST_QUERY = Refusal(
    InvalidListQuery(details={"pageSize": [f"Must be an integer from 1 to {MAX_PAGE_SIZE}."]}),
    "`pageSize` is not an integer from 1 to 200, or `cursor` is not one this service issued; "
    "`details` names the parameter.",
)


def cursor_page(item: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """The response of a list: ``{"results": [...], "next": url|null, "previous": url|null}``.

    The views paginate by hand (config.pagination), so drf-spectacular cannot
    see the envelope; this serializer describes it and names its component.
    """
    link = "Path-absolute URL of the {} page, or null.".format
    fields: dict[str, Any] = {
        "results": item(many=True),
        "next": serializers.CharField(allow_null=True, help_text=link("next")),
        "previous": serializers.CharField(allow_null=True, help_text=link("previous")),
    }
    return type(name, (serializers.Serializer,), fields)


# --- Operation schemas ------------------------------------------------------


def _problem_responses(refusals: Sequence[Refusal]) -> dict[tuple[int, str], OpenApiResponse]:
    """One response per status: every code it can carry, and one example body."""
    by_status: dict[int, list[Refusal]] = {}
    for refusal in refusals:
        by_status.setdefault(refusal.body["status"], []).append(refusal)
    responses = {}
    for status, group in sorted(by_status.items()):
        first = group[0].body
        description = "\n".join(f"- `{r.body['error']}`: {r.when}" for r in group)
        responses[(status, PROBLEM_CONTENT_TYPE)] = OpenApiResponse(
            Problem,
            description=description,
            examples=[OpenApiExample(first["error"], value=first)],
        )
    return responses


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


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
        INTERNAL_ERROR,
        *refusals,
    ]
    statuses = [*responses, *(r.body["status"] for r in refusal_list)]
    headers = [REQUEST_ID, WWW_AUTHENTICATE, _replayed_header(statuses)]
    if location is not None:
        headers.append(_location_header(*location))
    headers.append(_retry_after_header([s for s in (202, 409, 429) if s in statuses]))
    return extend_schema(
        operation_id=operation_id,
        summary=summary,
        description=description,
        tags=[tag],
        request=request,
        responses={**responses, **_problem_responses(refusal_list)},
        parameters=[*path_parameters, IDEMPOTENCY_KEY, *headers],
        examples=list(examples),
    )


def read_schema(
    *,
    operation_id: str,
    summary: str,
    description: str,
    tag: str,
    response: OpenApiResponse,
    refusals: Sequence[Refusal],
    parameters: Sequence[OpenApiParameter] = (),
    retry_after: bool = False,
) -> Decorator:
    """``extend_schema`` for a read: its body, ``401`` and the other errors.

    ``refusals`` are the read's own: ``404`` for a resource, ``400`` for a list.
    """
    every_refusal = [
        NOT_AUTHENTICATED,
        AUTHENTICATION_FAILED,
        *refusals,
        NOT_ACCEPTABLE,
        THROTTLED,
        INTERNAL_ERROR,
    ]
    return extend_schema(
        operation_id=operation_id,
        summary=summary,
        description=description,
        tags=[tag],
        responses={200: response, **_problem_responses(every_refusal)},
        parameters=[
            *parameters,
            REQUEST_ID,
            WWW_AUTHENTICATE,
            _retry_after_header([200, 429] if retry_after else [429]),
        ],
    )


# --- Post-processing --------------------------------------------------------

_SNAKE_PARAMETER = re.compile(r"\{([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\}")


def _camel(snake: str) -> str:
    first, *rest = snake.split("_")
    return first + "".join(part.capitalize() for part in rest)


def camel_case_path_parameters(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """``/v1/orders/{order_id}`` → ``/v1/orders/{orderId}``, as the contract names it.

    The URLconf keeps Python's names for view arguments; the wire speaks camelCase.
    """
    paths = {}
    for path, item in result.get("paths", {}).items():
        renamed = {match: _camel(match) for match in _SNAKE_PARAMETER.findall(path)}
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter["name"] in renamed:
                    parameter["name"] = renamed[parameter["name"]]
        paths[_SNAKE_PARAMETER.sub(lambda m: "{" + _camel(m.group(1)) + "}", path)] = item
    result["paths"] = paths
    return result


def require_every_output_field(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Mark every member of a response body required.

    Output serializers render every field on every response, but
    drf-spectacular leaves out of ``required`` the model fields that have a
    default (``id``, ``status``), which would tell clients they may be absent.
    """
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith(("Output", "Page")) and "properties" in component:
            component["required"] = sorted(component["properties"])
    return result


def _link(operation_id: str, description: str, **fields: Any) -> dict[str, Any]:
    return {"operationId": operation_id, "description": description, **fields}


_ORDER_ID = {"orderId": "$response.body#/orderId"}
# Where an answer leads. Documented as OpenAPI links, and followed by the
# stateful tests of schemathesis (tests/test_fuzz.py). A requestBody holding
# runtime expressions is schemathesis' reading of the link object; to people
# it says which members to copy.
_LINKS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("createOrder", "201"): {
        "GetOrder": _link("getOrder", "Read the order.", parameters=_ORDER_ID),
        "CancelOrder": _link("cancelOrder", "Cancel the order.", parameters=_ORDER_ID),
        "PayOrder": _link(
            "createPayment",
            "Pay the order: its id, total and currency.",
            requestBody={
                "orderId": "$response.body#/orderId",
                "amount": "$response.body#/order/totalAmount",
                "currency": "$response.body#/order/currency",
            },
        ),
    },
    ("cancelOrder", "200"): {
        "GetOrder": _link("getOrder", "Read the cancelled order.", parameters=_ORDER_ID),
    },
    ("cancelOrder", "202"): {
        "GetOperation": _link(
            "getOperation",
            "Poll the refund.",
            parameters={"operationId": "$response.body#/operationId"},
        ),
        "GetOrder": _link("getOrder", "Read the order.", parameters=_ORDER_ID),
    },
    ("createPayment", "202"): {
        "GetPayment": _link(
            "getPayment",
            "Read the payment.",
            parameters={"paymentId": "$response.body#/paymentId"},
        ),
        "GetOperation": _link(
            "getOperation",
            "Poll the charge.",
            parameters={"operationId": "$response.body#/operationId"},
        ),
        "CancelOrder": _link(
            "cancelOrder",
            "Cancel the order being paid.",
            parameters={"orderId": "$request.body#/orderId"},
        ),
    },
    ("getPayment", "200"): {
        "GetOrder": _link(
            "getOrder", "Read the paid order.", parameters={"orderId": "$response.body#/orderId"}
        ),
    },
}


def add_links(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Put :data:`_LINKS` on the responses they start from."""
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for status, response in operation.get("responses", {}).items():
                if links := _LINKS.get((operation.get("operationId", ""), status)):
                    response["links"] = links
    return result
