"""Every error the service answers, in one format.

The body is RFC 9457 problem details (``type``, ``title``, ``status``) plus
the members the contract names: ``error`` (a stable PascalCase code),
``message`` (for people), ``traceId`` (the request's ``X-Request-ID``, or
the caller's trace id when the request carries a valid W3C ``traceparent``:
api.middleware) and, where useful, ``details``. Domain errors subclass :class:`ApplicationError`
next to the service that raises them; DRF's and Django's own exceptions are
translated here, and anything unexpected becomes ``500 InternalError``
without a trace of the code that failed. A database that is down or broke
off the request's transaction is not a bug: ``503 ServiceUnavailable``,
with ``Retry-After`` (:func:`database_unavailable`).
"""

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any, ClassVar, TypeGuard

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from rest_framework import exceptions as drf
from rest_framework.serializers import as_serializer_error

from api.problem import PROBLEM_CONTENT_TYPE, problem_body
from observability.tracing import current_trace_id

logger = logging.getLogger(__name__)


class ApplicationError(Exception):
    """A refusal the client can act on, rendered as a problem response.

    Subclasses set ``status_code``, ``code`` and ``title``; an instance may
    carry a specific ``message``, ``details``, extra top-level members and
    response headers.
    """

    status_code: ClassVar[int] = 400
    code: ClassVar[str] = "BadRequest"
    title: ClassVar[str] = "Bad request"
    default_message: ClassVar[str] = "The request cannot be processed."

    def __init__(
        self,
        message: str | None = None,
        *,
        details: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.message = message or self.default_message
        self.details = details
        self.extra = extra or {}
        self.headers = headers or {}
        super().__init__(self.message)


class NotFound(ApplicationError):
    """A resource named in the path does not exist for the caller.

    Apps subclass it per resource (``NoSuchOrder``); another tenant's
    resource is answered alike, so that ids reveal nothing.
    """

    status_code = 404
    code = "NotFound"
    title = "Not found"
    default_message = "No such resource."


def size_text(size: int) -> str:
    """``512 MiB``, ``8 KiB``, ``1000 bytes``: a size as the docs and messages spell it."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def body_limit_text() -> str:
    """``1 MiB``: the request body limit (``MAX_REQUEST_BODY_BYTES``) as people read it."""
    return size_text(settings.MAX_REQUEST_BODY_BYTES)


class UriTooLong(ApplicationError):
    """A request line over gunicorn's limit (4094 bytes), refused before the service reads it.

    gunicorn answers it, with the body api/gunicorn_worker.py writes (a
    module that loads without Django, so it keeps its own table); this class
    is how the schema documents it, and tests/docs/test_openapi.py holds the
    two to the same code, title and message.
    """

    status_code = 414
    code = "UriTooLong"
    title = "URI too long"
    default_message = "The request line is too long."


class PayloadTooLarge(ApplicationError):
    status_code = 413
    code = "PayloadTooLarge"
    title = "Payload too large"

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        super().__init__(message or f"Request bodies are limited to {body_limit_text()}.", **kwargs)


class LengthRequired(ApplicationError):
    status_code = 411
    code = "LengthRequired"
    title = "Length required"
    default_message = (
        "This server cannot read a body of unknown length here; send it with a Content-Length."
    )


class InternalError(ApplicationError):
    status_code = 500
    code = "InternalError"
    title = "Internal error"
    default_message = (
        "The server failed to process the request. Quote the traceId when reporting it."
    )


# Retry-After of 503 ServiceUnavailable, in whole seconds (the header's
# unit). A deadlock, serialization failure or lock wait clears at once, and
# a restart or failover of PostgreSQL takes a few seconds: two seconds lets
# a retry succeed in the common cases without every client of a struggling
# database coming back at once; a client that still gets 503 waits again.
DATABASE_RETRY_AFTER_SECONDS = 2


class ServiceUnavailable(ApplicationError):
    status_code = 503
    code = "ServiceUnavailable"
    title = "Service unavailable"
    default_message = (
        "The service's database is not available just now, so the request was not "
        "carried out. Retry it after the number of seconds in Retry-After."
    )

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("headers", {"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)})
        super().__init__(message, **kwargs)


def database_unavailable(
    exc: BaseException | None,
) -> TypeGuard[OperationalError | InterfaceError]:
    """Whether ``exc`` is the database failing under a request rather than a bug.

    Django's ``OperationalError`` and ``InterfaceError``: connection refused
    or lost, the server shutting down, a deadlock, a serialization failure,
    a lock wait or statement cut short by its timeout. The other database
    errors (``IntegrityError``, ``DataError``, ``ProgrammingError``) are bugs
    of ours: ``500 InternalError``.
    """
    return isinstance(exc, OperationalError | InterfaceError)


# DRF's exceptions, by class, to the contract's codes. Order matters where
# one class derives from another.
_DRF_CODES: list[tuple[type[drf.APIException], str, str]] = [
    (drf.ParseError, "MalformedJson", "Malformed JSON"),
    (drf.ValidationError, "ValidationError", "Validation failed"),
    (drf.NotAuthenticated, "NotAuthenticated", "Not authenticated"),
    (drf.AuthenticationFailed, "AuthenticationFailed", "Authentication failed"),
    (drf.PermissionDenied, "PermissionDenied", "Permission denied"),
    (drf.NotFound, "NotFound", "Not found"),
    (drf.MethodNotAllowed, "MethodNotAllowed", "Method not allowed"),
    (drf.NotAcceptable, "NotAcceptable", "Not acceptable"),
    (drf.UnsupportedMediaType, "UnsupportedMediaType", "Unsupported media type"),
    (drf.Throttled, "Throttled", "Too many requests"),
]


def problem_response(
    *,
    status: int,
    code: str,
    title: str,
    message: str,
    details: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> HttpResponse:
    """Render one problem details response; the single place that shapes errors."""
    response = HttpResponse(
        problem_body(
            status=status,
            code=code,
            title=title,
            message=message,
            trace_id=current_trace_id(),
            details=details,
            extra=extra,
        ),
        status=status,
        content_type=PROBLEM_CONTENT_TYPE,
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def render_exception(exc: BaseException) -> HttpResponse:
    """Turn any exception into the contract's problem response."""
    if isinstance(exc, ApplicationError):
        return problem_response(
            status=exc.status_code,
            code=exc.code,
            title=exc.title,
            message=exc.message,
            details=exc.details,
            extra=exc.extra,
            headers=exc.headers,
        )
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied()
    elif isinstance(exc, DjangoValidationError):
        exc = drf.ValidationError(detail=as_serializer_error(exc))
    elif isinstance(exc, RequestDataTooBig):
        return render_exception(PayloadTooLarge())

    if isinstance(exc, drf.APIException):
        return _render_api_exception(exc)

    if database_unavailable(exc):
        # Not a bug: one warning per request, with the exception for
        # operators, rather than an error with a traceback for every request
        # of an outage. Django would log each 5xx answer once more as an
        # error (django.utils.log.log_response); this is its mark of a
        # response logged already.
        logger.warning("Database unavailable; answered 503", exc_info=exc)
        response = render_exception(ServiceUnavailable())
        response._has_been_logged = True  # type: ignore[attr-defined]  # noqa: SLF001 - Django reads it
        return response

    logger.exception("Unhandled error", exc_info=exc)
    return render_exception(InternalError())


def _render_api_exception(exc: drf.APIException) -> HttpResponse:
    code, title = next(
        ((code, title) for cls, code, title in _DRF_CODES if isinstance(exc, cls)),
        (_pascal_case(exc.default_code), str(exc.default_detail)),
    )
    headers = {}
    if auth_header := getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = auth_header
    if wait := getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(wait) + 1)

    if isinstance(exc, drf.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"nonFieldErrors": exc.detail}
        details, omitted = bounded_details(detail)
        message = "The request is not valid; see details."
        if omitted:
            message += f" {omitted} more error{'s' * (omitted > 1)} not listed."
        return problem_response(
            status=exc.status_code,
            code=code,
            title=title,
            message=message,
            details=details,
            headers=headers,
        )
    return problem_response(
        status=exc.status_code, code=code, title=title, message=str(exc.detail), headers=headers
    )


# The most a validation error's details take, in bytes of JSON. The error is
# stored with its key and replayed for a day, and a stored refusal is at most
# 8 KiB (docs/SPECIFICATION.md §3 rule 12); the rest of the problem body
# takes some 300 bytes. Every line of a 100-line order can be wrong in
# several ways, which used to make a 50 KB error.
MAX_DETAILS_BYTES = 7 * 1024 + 512


class _Budget:
    """Bytes left for details, and how many messages did not fit."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.omitted = 0

    def take(self, size: int) -> bool:
        if size > self.left:
            self.left = 0  # nothing after a part that did not fit, to keep the order
            return False
        self.left -= size
        return True


def bounded_details(detail: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """``detail`` as far as it fits in ``MAX_DETAILS_BYTES``, and how many messages did not.

    The errors are kept in the body's order, each field's messages whole;
    the first that does not fit ends the details, so that a list of the
    body's lines keeps its indexes (a prefix of it). The caller says how
    many more there are.
    """
    budget = _Budget(MAX_DETAILS_BYTES)
    kept = _within(dict(detail), budget)
    return (kept if isinstance(kept, dict) else {}), budget.omitted


_LEFT_OUT = object()


def _within(value: Any, budget: _Budget) -> Any:
    """What of ``value`` fits in ``budget``, or ``_LEFT_OUT``."""
    if isinstance(value, Mapping):
        kept: dict[str, Any] = {}
        for name, child in value.items():
            # "name": and a comma.
            if not budget.take(_json_size(name) + 2):
                budget.omitted += _messages(child)
                continue
            part = _within(child, budget)
            if part is not _LEFT_OUT:
                kept[name] = part
        return kept if kept or not value else _LEFT_OUT
    if isinstance(value, list) and any(isinstance(item, Mapping | list) for item in value):
        items: list[Any] = []
        for index, item in enumerate(value):
            part = _within(item, budget) if budget.take(1) else _LEFT_OUT
            if part is _LEFT_OUT:
                budget.omitted += sum(_messages(rest) for rest in value[index:])
                break
            items.append(part)
        return items if items or not value else _LEFT_OUT
    # A field's messages: kept whole or left out.
    if budget.take(_json_size(value) + 1):
        return value
    budget.omitted += _messages(value)
    return _LEFT_OUT


def _messages(value: Any) -> int:
    if isinstance(value, Mapping):
        return sum(_messages(child) for child in value.values())
    if isinstance(value, list):
        return sum(_messages(child) for child in value)
    return 1


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _pascal_case(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.split("_"))


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> HttpResponse:
    """DRF's ``EXCEPTION_HANDLER``."""
    return render_exception(exc)


# Django's own error views, for what never reaches a DRF view (unknown
# URLs, a refused Host header, a crash in middleware).


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if isinstance(exception, RequestDataTooBig):
        return render_exception(PayloadTooLarge())
    return render_exception(drf.ValidationError({"request": ["Bad request."]}))


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render_exception(drf.PermissionDenied())


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if isinstance(exception, Resolver404):
        return render_exception(NotFound(_no_route_message(request.path_info)))
    return render_exception(drf.NotFound())


def _no_route_message(path: str) -> str:
    """Where to go from ``path``, which no route matches: the route meant, or the API's map.

    The route meant is named, never redirected to: a redirect would lose a
    command's body (a client follows a 301 or 302 with a GET). Only a path
    that a route matches is repeated (its ids bounded by their converter),
    never the one sent, which may be anything. A path missing its trailing
    slash never gets here: Django's CommonMiddleware (APPEND_SLASH)
    redirects it to the route with one, and no command's route ends with one.
    """
    for candidate, difference in (
        (path.removesuffix("/"), "without the trailing slash"),
        ("/v1" + path, "under /v1/"),
        ("/v1" + path.removesuffix("/"), "under /v1/ and without the trailing slash"),
    ):
        if candidate not in (path, "/v1") and _routed(candidate):
            return f"No route matches this path; {candidate} does ({difference})."
    return (
        "No route matches this path. The API's routes are under /v1/: its schema at"
        " /v1/schema/ lists them, and its documentation is at /docs/."
    )


def _routed(path: str) -> bool:
    try:
        resolve(path)
    except Resolver404:
        return False
    return True


def server_error(request: HttpRequest) -> HttpResponse:
    # Django calls this while it handles the exception, which it does not
    # pass; a database failure in a view is answered before it gets here
    # (RequestContextMiddleware.process_exception), but one in a middleware
    # (a session saved after the view) arrives here, and is a 503 too.
    exc = sys.exception()
    if database_unavailable(exc):
        return render_exception(exc)
    return render_exception(InternalError())
