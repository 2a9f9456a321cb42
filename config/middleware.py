"""Request-wide plumbing: the request id and the body size limit."""

import re
from collections.abc import Callable

import structlog
from django.conf import settings
from django.http import HttpRequest, HttpResponse

from config.exceptions import PayloadTooLarge, render_exception
from config.tracing import bind_trace_id, new_trace_id, reset_trace_id

# A client's X-Request-ID is echoed only if it is short and plain, so that
# it can be logged and put in a header without escaping.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")


class RequestIdMiddleware:
    """Give every request an id and every response ``X-Request-ID``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if _SANE_REQUEST_ID.fullmatch(incoming) else new_trace_id()
        token = bind_trace_id(request_id)
        structlog.contextvars.bind_contextvars(trace_id=request_id)
        try:
            response = self.get_response(request)
        finally:
            reset_trace_id(token)
            structlog.contextvars.unbind_contextvars("trace_id")
        response["X-Request-ID"] = request_id
        return response


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
