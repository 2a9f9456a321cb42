"""Request-wide plumbing: trace id, request log and metrics, body size limit."""

import re
import time
from collections.abc import Callable

import structlog
from django.conf import settings
from django.http import HttpRequest, HttpResponse

from config.exceptions import PayloadTooLarge, render_exception
from config.metrics import HTTP_DURATION, HTTP_REQUESTS
from config.tracing import bind_trace_id, new_trace_id, reset_trace_id

# A client's X-Request-ID is echoed only if it is short and plain, so that
# it can be logged and put in a header without escaping.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")

logger = structlog.get_logger("order_service.request")


class RequestContextMiddleware:
    """Give every request an id, one log line and its HTTP metrics.

    The id (``X-Request-ID``, echoed when the client sent a sane one) is the
    ``traceId`` of errors and of every log line written while serving the
    request; the idempotency layer adds the command and its outcome to the
    same context, so the one line per request carries them.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if _SANE_REQUEST_ID.fullmatch(incoming) else new_trace_id()
        token = bind_trace_id(request_id)
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(trace_id=request_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            response["X-Request-ID"] = request_id
            self._record(request, response, time.perf_counter() - started)
            return response
        finally:
            reset_trace_id(token)
            structlog.contextvars.clear_contextvars()

    @staticmethod
    def _record(request: HttpRequest, response: HttpResponse, seconds: float) -> None:
        match = request.resolver_match
        route = f"/{match.route}" if match is not None else "unmatched"
        HTTP_REQUESTS.labels(request.method, route, response.status_code).inc()
        HTTP_DURATION.labels(request.method, route).observe(seconds)
        principal = getattr(request, "user", None)
        logger.info(
            "request",
            method=request.method,
            path=request.path,
            route=route,
            status=response.status_code,
            duration_ms=round(seconds * 1000, 2),
            principal=str(principal) if getattr(principal, "pk", None) else None,
        )


class BodySizeLimitMiddleware:
    """Refuse bodies over the limit before anything reads them.

    Django enforces ``DATA_UPLOAD_MAX_MEMORY_SIZE`` only when ``request.body``
    is read, and DRF's parsers read the stream directly, so a declared
    ``Content-Length`` is checked here; a chunked body that turns out too
    large still fails when it is read (``RequestDataTooBig``, also 413).
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
        return self.get_response(request)
