"""The error body, and the errors each endpoint documents.

:class:`Problem` is the error body, and a :class:`Refusal` is one error an
endpoint may answer, with its example rendered by
:func:`api.errors.render_exception` itself, so the documented bodies cannot
drift from what the service answers. Each status of an endpoint gets a
named subclass of :class:`Problem` (:func:`problem_responses`) whose
``error`` enumerates its codes and whose ``details`` are typed, so that a
generated client gets real types.
"""

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import cached_property, partial
from http import HTTPStatus
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
)
from rest_framework import exceptions as drf
from rest_framework import serializers

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
from api.parsers import MAX_DEPTH
from api.problem import PROBLEM_CONTENT_TYPE


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
    traceId = serializers.CharField(
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
