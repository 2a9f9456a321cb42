"""The OpenAPI machinery every endpoint shares: drf-spectacular, taught the house rules.

- :class:`StrictSerializerScheme` describes input as strictly as
  :class:`api.fields.StrictSerializer` validates it, amending what
  drf-spectacular makes of a serializer (:func:`default_serializer_schema`).
- :class:`Problem` is the error body, and a :class:`Refusal` is one error
  an endpoint may answer, with its example rendered by
  :func:`api.errors.render_exception` itself, so the documented bodies
  cannot drift from what the service answers. Each status of an endpoint
  gets a named subclass of :class:`Problem` (:func:`problem_responses`)
  whose ``error`` enumerates its codes and whose ``details`` are typed, so
  that a generated client gets real types.
- :func:`read_schema` decorates a read with everything the API promises of
  every read (``401``, ``406``, ``429``, ``500``, ``503``, ``X-Request-ID``), so no
  endpoint can forget one; commands add the idempotency layer's part
  (idempotency/schema.py).
- The post-processing hooks name path parameters in camelCase, mark every
  member of a response body required, and put an app's links on its
  responses (:func:`links_hook`).

What belongs to one app (its endpoints' decorators, its links) lives in
that app: in its ``schema.py``, or beside the one view it describes (the
look-up of an idempotency key).
"""

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import cached_property, partial
from http import HTTPStatus
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import exceptions as drf
from rest_framework import serializers

from api.conditional import PreconditionFailed
from api.errors import (
    DATABASE_RETRY_AFTER_SECONDS,
    InternalError,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    UriTooLong,
    body_limit_text,
    render_exception,
)
from api.pagination import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    MIN_PAGE_SIZE,
    InvalidListQuery,
)
from api.parsers import MAX_DEPTH, MAX_SAFE_INTEGER
from api.problem import PROBLEM_CONTENT_TYPE

# --- drf-spectacular's own description of a serializer ------------------------


def default_serializer_schema(
    auto_schema: AutoSchema, serializer: serializers.Serializer[Any], direction: Any
) -> dict[str, Any]:
    """The schema drf-spectacular makes of ``serializer`` by itself, for an extension to amend.

    An extension of one exact class gets it from its base,
    ``super().map_serializer()`` (idempotency's ``KeyLinksScheme`` does).
    That base maps the extension's ``target_class``, though, not the
    serializer matched: for an extension of every subclass
    (:class:`StrictSerializerScheme`) it is the base class, without the
    subclass's fields. drf-spectacular has no public call that maps the
    serializer matched, so this is the one caller of its private
    ``AutoSchema._map_basic_serializer``; tests/docs/test_openapi.py pins
    that method's signature and what it makes of a small serializer, so that
    an upgrade that changes it fails there rather than changing the schema.

    :raises AssertionError: ``serializer`` is not a plain serializer (a list
        serializer, say): drf-spectacular's own check.
    """
    schema: dict[str, Any] = auto_schema._map_basic_serializer(serializer, direction)  # noqa: SLF001
    return schema


# --- Strict input ------------------------------------------------------------


class StrictSerializerScheme(OpenApiSerializerExtension):
    """Input serializers, described as strictly as they validate.

    Without these constraints a client generated from the schema (or a
    fuzzer) would believe that requests the service refuses are valid.
    """

    target_class = "api.fields.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        serializer = self.target
        schema = default_serializer_schema(auto_schema, serializer, direction)
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


def _constrain_list(field: serializers.ListSerializer[Any], prop: dict[str, Any]) -> None:
    # drf-spectacular reads neither allow_empty nor the length bounds of a
    # nested list (which DRF's stubs do not declare either).
    min_length: int | None = getattr(field, "min_length", None)
    max_length: int | None = getattr(field, "max_length", None)
    min_items = min_length or (0 if field.allow_empty else 1)
    if min_items:
        prop["minItems"] = min_items
    if max_length is not None:
        prop["maxItems"] = max_length


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


class Problem(serializers.Serializer[Any]):
    """An error: RFC 9457 problem details plus the service's own members.

    Served as ``application/problem+json``. ``error`` is the stable code to
    branch on; ``message`` is for people and may change.

    Each response documents its own subclass (:func:`problem_responses`):
    ``error`` is an enum of the codes that response can carry, and
    ``details`` (with any other member) is typed by what those codes put there.
    """

    type = serializers.CharField(help_text="`urn:order-service:problem:<error>`.")
    title = serializers.CharField(help_text="A short summary of the error code.")
    status = serializers.IntegerField(help_text="The HTTP status code.")
    error = serializers.CharField(help_text="The stable machine code, PascalCase.")
    message = serializers.CharField(help_text="What went wrong, for people.")
    traceId = serializers.CharField(  # noqa: N815 - the wire name
        help_text="The request's `X-Request-ID`; quote it when reporting a problem."
    )


class FieldErrors(serializers.DictField):
    """``details`` of a ``ValidationError``: each field → its messages.

    A nested object or list nests its errors alike (``{"items": {"0": {"qty": […]}}}``),
    which a serializer cannot say: :class:`FieldErrorsScheme` writes the schema.
    """


class FieldErrorsScheme(OpenApiSerializerFieldExtension):
    """``FieldErrors``, a recursive component: field → messages, or → the errors of its members."""

    target_class = FieldErrors

    def map_serializer_field(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        component = ResolvedComponent(
            name="FieldErrors",
            type=ResolvedComponent.SCHEMA,
            object="FieldErrors",
            schema={
                "type": "object",
                "description": (
                    "Each field that failed → its messages; a nested object or list → the "
                    "errors of its members (list items by index)."
                ),
                "additionalProperties": {
                    "oneOf": [
                        {"type": "array", "items": {"type": "string"}},
                        {"$ref": "#/components/schemas/FieldErrors"},
                    ]
                },
            },
        )
        auto_schema.registry.register_on_missing(component)
        return component.ref


_EXAMPLE_TRACE_ID = "6f1c2a9e0b7d4c35a8e2f41d9b0c7e12"


def _rendered(error: BaseException) -> dict[str, Any]:
    """The body the service answers for ``error``, with a fixed trace id."""
    body: dict[str, Any] = json.loads(render_exception(error).content)
    body["traceId"] = _EXAMPLE_TRACE_ID
    return body


Member = Callable[..., serializers.Field[Any, Any, Any, Any]]


@dataclass(frozen=True)
class Refusal:
    """An error an endpoint may answer: an instance to render, and when it happens.

    ``members`` type what the error adds to :class:`Problem` (``details``,
    ``idempotencyKey``): each a field class, or a partial of one, that takes
    ``required``. Without them, the ``details`` of the rendered example are
    typed from their values: the facts behind a business rejection.
    """

    error: BaseException
    when: str
    members: Mapping[str, Member] = dataclass_field(default_factory=dict)

    @cached_property
    def body(self) -> dict[str, Any]:
        return _rendered(self.error)

    @property
    def code(self) -> str:
        return str(self.body["error"])

    @property
    def status(self) -> int:
        return int(self.body["status"])


# The `when` of a shared refusal says when it happens, never whether it is
# stored: reads share these and store nothing, and for a command
# idempotency.schema.command_schema appends what its key keeps, from the one
# list it keeps of that (STORED_ANSWERS), so the two cannot disagree.
MALFORMED_JSON = Refusal(
    drf.ParseError("The body is not valid JSON: Expecting value (line 1, column 1)."),
    "the body is not JSON, or not I-JSON (RFC 7493: UTF-8, unique member names, "
    "integers within ±(2^53 - 1), numbers within the range of a double, no lone "
    f"surrogates), its arrays and objects nest deeper than {MAX_DEPTH} levels, a member name "
    "holds U+0000, or the body ended before its `Content-Length`.",
)
NOT_AUTHENTICATED = Refusal(drf.NotAuthenticated(), "no `Authorization` header.")
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
    "a body whose `Content-Type` is not `application/json`.",
)
URI_TOO_LONG = Refusal(
    UriTooLong(),
    "the request line (method, path and query string) is over 4094 bytes: refused by "
    "gunicorn before the service reads it.",
)
PAYLOAD_TOO_LARGE = Refusal(
    PayloadTooLarge(),
    f"the body is over {body_limit_text()}, whether sent with a `Content-Length` or chunked.",
)
THROTTLED = Refusal(
    drf.Throttled(wait=29),
    "over the principal's rate limit. Only when the deployment sets "
    "`API_THROTTLE_RATE` (off by default).",
)
INTERNAL_ERROR = Refusal(InternalError(), "the service failed; quote the `traceId`.")
SERVICE_UNAVAILABLE = Refusal(
    ServiceUnavailable(),
    "the service's database was unreachable or failed under the request (connection lost, "
    "deadlock, serialization failure, a lock wait timed out). Nothing was done; retry after "
    f"`Retry-After` seconds ({DATABASE_RETRY_AFTER_SECONDS}).",
)


FIELD_ERRORS: Mapping[str, Member] = {
    "details": partial(FieldErrors, help_text="Each field that failed → its messages.")
}


def not_found(resource: str, example_id: str) -> Refusal:
    """``404 NotFound`` for a path id: missing, or another tenant's."""
    return Refusal(
        NotFound(f"No {resource} {example_id}."),
        f"no such {resource} in your tenant (another tenant's is answered alike).",
    )


def validation_error(serializer_class: type[serializers.Serializer[Any]], body: Any) -> Refusal:
    """``400 ValidationError``, with the ``details`` the serializer gives ``body``."""
    serializer = serializer_class(data=body)
    if serializer.is_valid():
        raise ValueError(f"{body!r} is a valid {serializer_class.__name__}")
    return Refusal(
        drf.ValidationError(serializer.errors),
        "a well-formed body that fails validation; `details` maps each field to its messages.",
        members=FIELD_ERRORS,
    )


# --- Parameters and response headers ---------------------------------------


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


def location_header(status: int, what: str) -> OpenApiParameter:
    return OpenApiParameter(
        "Location",
        location=OpenApiParameter.HEADER,
        response=[status],
        required=True,
        type=str,
        description=f"Path-absolute URL of {what}.",
    )


def retry_after_header(statuses: Sequence[int]) -> OpenApiParameter:
    return OpenApiParameter(
        "Retry-After",
        location=OpenApiParameter.HEADER,
        response=list(statuses),
        type=int,
        description=(
            "Seconds to wait before asking again: while an operation is processing (202 "
            "and the operation; it grows with the operation's age, see `getOperation`), for "
            "`IdempotencyKeyInProgress` (409), `Throttled` (429) and `ServiceUnavailable` "
            "(503)."
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


ETAG = OpenApiParameter(
    "ETag",
    location=OpenApiParameter.HEADER,
    response=[200, 304],
    required=True,
    type=str,
    description=(
        "A strong entity tag: 128 bits of the SHA-256 of the body, quoted. It changes "
        "whenever the representation does. Send it back in `If-None-Match` to poll "
        "cheaply, or in `If-Match` to change the resource only as you read it."
    ),
)
IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    location=OpenApiParameter.HEADER,
    type=str,
    description=(
        'One or more ETags (`"…"`, `W/"…"`, comma-separated) or `*`. If one matches the '
        "current representation (weak comparison), the answer is `304 Not Modified`, with "
        "the `ETag` and no body."
    ),
)
NOT_MODIFIED = OpenApiResponse(
    None, "Not modified: `If-None-Match` holds the current ETag. No body; the `ETag` repeats."
)


def if_match_parameter(when: str) -> OpenApiParameter:
    """``If-Match`` of a command that changes an existing resource; ``when`` says where it acts."""
    return OpenApiParameter(
        "If-Match",
        location=OpenApiParameter.HEADER,
        type=str,
        description=(
            "Optional. The ETag of the resource as you last read it (`GET`), or `*`: "
            f"{when} A stale tag, or no resource, is `412 PreconditionFailed`, a final "
            "answer stored and replayed under the key. The header is not part of the "
            "fingerprint: a retry under the same key replays the first answer, whatever the "
            "tag says by then."
        ),
    )


PRECONDITION_FAILED = Refusal(
    PreconditionFailed(),
    "`If-Match` names no current ETag of the resource (it changed since you read it), or "
    "there is none. Read it again and decide.",
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
        "Opaque and signed: pass back the `nextCursor` or `previousCursor` of a page (the "
        "`next` and `previous` links carry the same). It is good only on the list that "
        "issued it: the same path, tenant and filters (`type`; not `pageSize`). Any other "
        "(made up, of another list or filter, or issued under another `SECRET_KEY`) is "
        "`400 ValidationError`; start again without a cursor."
    ),
)
PAGE_SIZE = OpenApiParameter(
    "pageSize",
    type={
        "type": "integer",
        "minimum": MIN_PAGE_SIZE,
        "maximum": MAX_PAGE_SIZE,
        "default": DEFAULT_PAGE_SIZE,
    },
    description=(
        f"Results per page: an integer from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}, default "
        f"{DEFAULT_PAGE_SIZE}. Anything else is `400 ValidationError`, never quietly replaced."
    ),
    examples=[OpenApiExample("Twenty", value=20)],
)
INVALID_LIST_QUERY = Refusal(
    InvalidListQuery(
        details={"pageSize": [f"Must be an integer from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}."]}
    ),
    f"`pageSize` is not an integer from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}, or `cursor` is "
    "not one this list issued; `details` names the parameter.",
    members=FIELD_ERRORS,
)


def cursor_page(
    item: type[serializers.Serializer[Any]] | Callable[..., Any], name: str
) -> type[serializers.Serializer[Any]]:
    """The response of a list: ``{"results", "next", "previous", "nextCursor", "previousCursor"}``.

    The views paginate by hand (api.pagination), so drf-spectacular cannot
    see the envelope; this serializer describes it and names its component.
    ``item`` makes the results' serializer, given ``many=True``: a
    serializer class, or a function that makes one (a polymorphic proxy).
    """
    link = "Path-absolute URL of the {} page, or null.".format
    cursor = "The `cursor` parameter that asks for the {} page, or null.".format
    fields: dict[str, Any] = {
        "results": item(many=True),
        "next": serializers.CharField(allow_null=True, help_text=link("next")),
        "previous": serializers.CharField(allow_null=True, help_text=link("previous")),
        "nextCursor": serializers.CharField(allow_null=True, help_text=cursor("next")),
        "previousCursor": serializers.CharField(allow_null=True, help_text=cursor("previous")),
    }
    return type(name, (serializers.Serializer,), fields)


# --- Operation schemas ------------------------------------------------------

# The problem serializer of each (status, codes): a set of codes gets one
# component, whichever endpoints answer it, so its `error` enum gets one name.
_PROBLEMS: dict[tuple[int, tuple[str, ...]], type[Problem]] = {}


def problem_responses(
    refusals: Sequence[Refusal], *, operation_id: str, own: Sequence[Refusal] = ()
) -> dict[tuple[int, str], OpenApiResponse]:
    """One response per status: every code it can carry, and one example body.

    ``refusals`` are every error of the endpoint, ``own`` those among them that
    are the endpoint's rather than every endpoint's (its domain refusals).
    """
    by_status: dict[int, list[Refusal]] = {}
    for refusal in refusals:
        by_status.setdefault(refusal.status, []).append(refusal)
    responses = {}
    for status, group in sorted(by_status.items()):
        first = group[0].body
        # One bullet per code, which a code given for several reasons
        # (a command's own 503 beside the database's) lists in turn.
        whens: dict[str, list[str]] = {}
        for refusal in group:
            whens.setdefault(refusal.code, []).append(refusal.when)
        description = "\n".join(f"- `{code}`: {' Or: '.join(w)}" for code, w in whens.items())
        scope = operation_id if any(r in own for r in group) else ""
        responses[(status, PROBLEM_CONTENT_TYPE)] = OpenApiResponse(
            _problem(status, group, scope),
            description=description,
            examples=[OpenApiExample(first["error"], value=first)],
        )
    return responses


def _problem(status: int, group: Sequence[Refusal], scope: str) -> type[Problem]:
    """The :class:`Problem` of one response, named for client generators.

    ``NotFoundProblem`` when it has one code; otherwise after its status
    (``UnauthorizedProblem``), and the endpoint too (``createPayment`` →
    ``CreatePaymentConflictProblem``) when the endpoint adds codes of its own.
    """
    codes = tuple(dict.fromkeys(r.code for r in group))
    if (status, codes) in _PROBLEMS:
        return _PROBLEMS[status, codes]
    if len(codes) == 1:
        name = f"{codes[0]}Problem"
    else:
        phrase = HTTPStatus(status).phrase.title().replace(" ", "").replace("-", "")
        name = f"{scope[:1].upper()}{scope[1:]}{phrase}Problem"
    error = serializers.ChoiceField(choices=codes, help_text="The stable machine code, PascalCase.")
    fields = {"error": error, **_members(group, name)}
    problem = type(name, (Problem,), {**fields, "__doc__": Problem.__doc__})
    _PROBLEMS[status, codes] = problem
    return problem


def _members(
    group: Sequence[Refusal], problem_name: str
) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
    """What the group's codes add to :class:`Problem`, each required if every code adds it."""
    declared: dict[str, list[Member]] = {}
    for refusal in group:
        for name, member in refusal.members.items():
            declared.setdefault(name, []).append(member)
    # Facts, from the examples of the codes that declare no members.
    facts = [r.body["details"] for r in group if not r.members and "details" in r.body]
    if facts:
        details = type(
            f"{problem_name}Details",
            (serializers.Serializer,),
            {k: _fact(v) for fact in facts for k, v in fact.items()},
        )
        help_text = "The facts behind the refusal, which depend on `error`."
        declared.setdefault("details", []).extend(
            partial(details, help_text=help_text) for _ in facts
        )
    members = {}
    for name, factories in declared.items():
        if len({_field_class(f) for f in factories}) > 1:
            raise TypeError(f"{problem_name}: its codes give `{name}` different types")
        members[name] = factories[0](required=len(factories) == len(group))
    return members


def _field_class(member: Member) -> Any:
    return member.func if isinstance(member, partial) else member


def _fact(value: Any) -> serializers.Field[Any, Any, Any, Any]:
    """A field for one fact of an example's ``details``, typed from its value."""
    if isinstance(value, bool):
        return serializers.BooleanField(required=False)
    if isinstance(value, int):
        return serializers.IntegerField(required=False)
    if isinstance(value, str):
        return serializers.CharField(required=False)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return serializers.ListField(child=serializers.CharField(), required=False)
    return serializers.JSONField(required=False)


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


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
    conditional: bool = False,
) -> Decorator:
    """``extend_schema`` for a read: its body, ``401`` and the other errors.

    ``refusals`` are the read's own: ``404`` for a resource, ``400`` for a list.
    ``conditional``: the read answers an ``ETag``, and ``304`` to ``If-None-Match``
    (:func:`api.conditional.conditional_read`).
    """
    every_refusal = [
        NOT_AUTHENTICATED,
        AUTHENTICATION_FAILED,
        *refusals,
        URI_TOO_LONG,
        NOT_ACCEPTABLE,
        THROTTLED,
        INTERNAL_ERROR,
        SERVICE_UNAVAILABLE,
    ]
    problems = problem_responses(every_refusal, operation_id=operation_id, own=refusals)
    return extend_schema(
        operation_id=operation_id,
        summary=summary,
        description=description,
        tags=[tag],
        responses={200: response, **({304: NOT_MODIFIED} if conditional else {}), **problems},
        parameters=[
            *parameters,
            *((IF_NONE_MATCH, ETAG) if conditional else ()),
            REQUEST_ID,
            WWW_AUTHENTICATE,
            retry_after_header(
                ([200, 304] if conditional else [200]) + [429, 503] if retry_after else [429, 503]
            ),
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


Links = Mapping[tuple[str, str], Mapping[str, Mapping[str, Any]]]


def link(operation_id: str, description: str, **fields: Any) -> dict[str, Any]:
    """One OpenAPI link object: where an answer leads, and which members to copy."""
    return {"operationId": operation_id, "description": description, **fields}


def links_hook(table: Links) -> Callable[..., dict[str, Any]]:
    """A post-processing hook that puts ``table``'s links on the responses they start from.

    ``table`` maps (operationId, status) to the links of that response.
    """

    def add_links(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        for item in result.get("paths", {}).values():
            for operation in item.values():
                if not isinstance(operation, dict):
                    continue
                for status, response in operation.get("responses", {}).items():
                    if links := table.get((operation.get("operationId", ""), status)):
                        response["links"] = links
        return result

    return add_links
