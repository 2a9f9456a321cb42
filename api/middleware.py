"""Request-wide plumbing: trace id, request log and metrics, whole bodies within the limit."""

import io
import re
import time
from collections.abc import Callable
from typing import Any

import structlog
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.functional import LazyObject, empty
from rest_framework.exceptions import ParseError

from api.connection import close_after_answer
from api.errors import LengthRequired, PayloadTooLarge, database_unavailable, render_exception
from observability.metrics import HTTP_DURATION, HTTP_REQUESTS
from observability.tracing import bind_trace_id, request_trace_id, reset_trace_id

# A client's X-Request-ID is echoed only if it is short and plain, so that
# it can be logged and put in a header without escaping.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")

logger = structlog.get_logger("order_service.request")

# HTTP's registered methods that anything here answers or refuses by name.
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestContextMiddleware:
    """Give every request an id, a trace, one log line and its HTTP metrics.

    The id (``X-Request-ID``, echoed when the client sent a sane one) is the
    ``traceId`` of errors and of every log line written while serving the
    request, unless the request carries a valid W3C ``traceparent``: it then
    joins the caller's trace, whose id is the ``traceId`` (and the generated
    ``X-Request-ID``; observability.tracing.request_trace_id). The
    idempotency layer adds the command and its outcome to the same context,
    so the one line per request carries them.

    It also answers a database failure under any view, DRF's or Django's
    own (the admin), as ``503 ServiceUnavailable``: Django's handler500 is
    not told the exception. DRF views answer theirs in api.errors already.

    Not django-structlog's ``RequestMiddleware``, weighed for the same job:
    it writes two lines a request (``request_started``, then
    ``request_finished``), where an operator searches one that carries the
    outcome, and the request's line is already the largest fixed cost a
    request pays (docs/SCALING.md, "What every request pays"); it binds a
    request id of its own where the id must be the W3C trace's; and it reads
    ``request.user`` for every line, which for the admin's requests reads
    the session from the database, failing again when the database has
    just failed. The trace, the metrics and the ``503`` would stay here all
    the same, so the library would replace the ``logger.info`` call alone.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        sane = incoming if _SANE_REQUEST_ID.fullmatch(incoming) else ""
        trace_id = request_trace_id(request.headers.get("traceparent", ""), request_id=sane)
        # Generated, the request id is the trace id, which a client can then
        # find in its own caller's trace.
        request_id = sane or trace_id
        token = bind_trace_id(trace_id)
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(trace_id=trace_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            response["X-Request-ID"] = request_id
            self._record(request, response, time.perf_counter() - started)
            return response
        finally:
            reset_trace_id(token)
            structlog.contextvars.clear_contextvars()

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if database_unavailable(exception):
            return render_exception(exception)
        return None

    @staticmethod
    def _record(request: HttpRequest, response: HttpResponse, seconds: float) -> None:
        match = request.resolver_match
        # Label values come from small fixed sets, never from what a client
        # typed: each new value is a new time series in every scrape, kept for
        # the life of the process (a random method per request would do).
        route = f"/{match.route}" if match is not None else "unmatched"
        method = request.method if request.method in _KNOWN_METHODS else "other"
        HTTP_REQUESTS.labels(method, route, response.status_code).inc()
        HTTP_DURATION.labels(method, route).observe(seconds)
        principal = getattr(request, "user", None)
        if isinstance(principal, LazyObject) and getattr(principal, "_wrapped", None) is empty:
            # Django's user (the admin's), which no view looked up: looking it
            # up for the log line would read the session and the user from
            # the database, and fail again if the database just failed.
            principal = None
        logger.info(
            "request",
            method=request.method,
            path=request.path,
            route=route,
            status=response.status_code,
            duration_ms=round(seconds * 1000, 2),
            principal=str(principal) if getattr(principal, "pk", None) else None,
        )


def client_address(request: HttpRequest) -> str:
    """The address of the client: the connecting one, or the proxy's word for it.

    Behind the proxy (``BEHIND_PROXY``), every connection comes from it; it
    overwrites ``X-Forwarded-For`` with the address that connected to it.
    Facing clients directly, that header is whatever a client wrote.
    """
    if settings.BEHIND_PROXY and (forwarded := request.META.get("HTTP_X_FORWARDED_FOR")):
        return str(forwarded.split(",")[-1].strip())
    return str(request.META.get("REMOTE_ADDR", ""))


# Marks WholeBodyMiddleware leaves in the environ (request.META).
INCOMPLETE_BODY = "order_service.incomplete_body"
UNREADABLE_BODY = "order_service.unreadable_body"


class WholeBodyMiddleware:
    """WSGI middleware: hand the application every request body whole, or say why not.

    Django reads a body only as far as ``CONTENT_LENGTH``. A chunked body
    (``Transfer-Encoding: chunked``) has none, so it would read as empty: a
    command would run, and its answer be stored, as if the client had sent
    nothing, and the client's retry with the same key would then conflict.
    And a body that ends before its ``Content-Length`` would read as
    whatever arrived. Here every body is read before the application
    starts: a chunked one up to one byte past the limit (the server has
    taken the chunks apart; ``wsgi.input_terminated`` says it reads to the
    end), a declared one in full. What was read becomes the body, with its
    true length; what cannot be is marked in the environ for
    :class:`RequestBodyMiddleware` to refuse, so that every refusal is a
    problem response like any other, before any command starts.

    A body that is not read to its end (over the limit, cut short, or
    unreadable here) leaves no next request to read on the connection: the
    answer then closes it, and says so (:mod:`api.connection`). Every other
    body is read whole, so the connection stays usable after any answer.
    """

    def __init__(self, application: Any) -> None:
        self.application = application

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        limit = settings.MAX_REQUEST_BODY_BYTES
        declared = environ.get("CONTENT_LENGTH") or ""
        if declared.isdigit() and int(declared) > limit:
            # Refused unread (a 413): the rest of the connection is its body.
            close_after_answer(environ)
        elif declared.isdigit() and int(declared) > 0:
            body = environ["wsgi.input"].read(int(declared))
            if len(body) < int(declared):
                environ[INCOMPLETE_BODY] = f"{len(body)} of {declared}"
                # The client stopped sending (it half-closed or went away):
                # there is no next request to read.
                close_after_answer(environ)
            environ["wsgi.input"] = io.BytesIO(body)
        elif not declared and environ.get("HTTP_TRANSFER_ENCODING"):
            if environ.get("wsgi.input_terminated"):
                body = environ["wsgi.input"].read(limit + 1)
                if len(body) > limit:
                    # An unknown remainder of chunks follows; draining it
                    # could take as long as the client cares to send.
                    close_after_answer(environ)
                # Over the limit, the length alone makes it a 413.
                environ["CONTENT_LENGTH"] = str(len(body))
                environ["wsgi.input"] = io.BytesIO(body)
            else:
                environ[UNREADABLE_BODY] = True
                close_after_answer(environ)
        return self.application(environ, start_response)


class RequestBodyMiddleware:
    """Refuse a body that is too large or was not received whole, before anything reads it.

    Django enforces ``DATA_UPLOAD_MAX_MEMORY_SIZE`` only when ``request.body``
    is read, and DRF's parsers read the stream directly, so the length is
    checked here. A chunked body has its length by now (WholeBodyMiddleware).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > settings.MAX_REQUEST_BODY_BYTES:
            return render_exception(PayloadTooLarge())
        if received := request.META.get(INCOMPLETE_BODY):
            return render_exception(
                ParseError(f"The body ended after {received} bytes its Content-Length announced.")
            )
        if request.META.get(UNREADABLE_BODY):
            return render_exception(LengthRequired())
        return self.get_response(request)
