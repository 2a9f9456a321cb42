"""gunicorn's threaded worker, answering what gunicorn itself refuses as problem+json.

gunicorn answers a request it cannot parse (a malformed request line, a
request line or header block over its limits, an unsupported transfer
coding) before the application sees it, with an HTML page that quotes the
offending bytes. This worker answers those in the service's error format
instead. And when the application asks for the connection to be closed
after its answer (:mod:`api.connection`), gunicorn closes it and says so.

This module must not import Django: gunicorn's arbiter loads the worker
class before it forks, and the application (Django's settings, the Celery
app) must be loaded by each worker after it. The ``api`` package imports
nothing on its own, and :mod:`api.problem` is plain Python.
"""

import http
import uuid
from collections.abc import Callable
from typing import Any

from gunicorn import util
from gunicorn.http.wsgi import Response
from gunicorn.workers.gthread import ThreadWorker

from api.connection import must_close
from api.problem import PROBLEM_CONTENT_TYPE, problem_body

# gunicorn's status -> the contract's code, title and message. The messages
# are fixed: gunicorn's own text quotes the client's bytes and its internals.
_PROBLEMS: dict[int, tuple[str, str, str]] = {
    400: ("BadRequest", "Bad request", "The request is not valid HTTP."),
    403: ("PermissionDenied", "Permission denied", "The request is not allowed."),
    414: ("UriTooLong", "URI too long", "The request line is too long."),
    417: ("ExpectationFailed", "Expectation failed", "The Expect header cannot be met."),
    431: (
        "RequestHeaderFieldsTooLarge",
        "Request header fields too large",
        "The request headers are too many or too large.",
    ),
    501: ("NotImplemented", "Not implemented", "The request's transfer coding is not supported."),
}
_INTERNAL_ERROR = (
    "InternalError",
    "Internal error",
    "The server failed to process the request. Quote the traceId when reporting it.",
)


class _CapturedAnswer:
    """A stand-in for the client socket that keeps what gunicorn writes to it.

    It offers what ``gunicorn.util.write_error`` uses: ``gettimeout`` (0.0,
    so ``write_nonblock`` writes at once), ``setblocking`` and ``sendall``.
    """

    def __init__(self) -> None:
        self.data = bytearray()

    def gettimeout(self) -> float:
        return 0.0

    def setblocking(self, flag: bool) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.data += data

    def status(self) -> int | None:
        """The status code of the captured answer, if it has a status line."""
        status_line = bytes(self.data).split(b"\r\n", 1)[0].split(b" ")
        if len(status_line) < 2 or not status_line[1].isdigit():
            return None
        return int(status_line[1])


def problem_answer(status: int) -> tuple[bytes, str]:
    """The raw HTTP answer for ``status`` and the trace id it carries.

    Statuses without a code of their own answer ``500 InternalError``.
    """
    problem = _PROBLEMS.get(status)
    if problem is None:
        status, problem = 500, _INTERNAL_ERROR
    code, title, message = problem
    trace_id = uuid.uuid4().hex
    body = problem_body(status=status, code=code, title=title, message=message, trace_id=trace_id)
    head = (
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
        "Connection: close\r\n"
        f"Content-Type: {PROBLEM_CONTENT_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"X-Request-ID: {trace_id}\r\n"
        "\r\n"
    )
    return head.encode("ascii") + body, trace_id


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


def closing_when_asked(application: WsgiApp) -> WsgiApp:
    """``application``, whose answers close the connection when it marked the environ.

    gunicorn decides ``Connection: keep-alive`` or ``close`` as it writes the
    status line, from ``Response.should_close()``, and keeps the connection
    when it said keep-alive, unless the request's body then cannot be
    drained (gunicorn 27 drains at most 64 KiB, within 5 s): a close nobody
    was told of, which a pooled client finds only when its next request
    fails. A ``Connection`` header from the application is dropped, as WSGI
    wants of hop-by-hop headers; ``Response.force_close()`` makes gunicorn
    say close, and close. The application cannot reach the Response, but
    gunicorn hands it the Response's own bound ``start_response``
    (``gthread.handle_request``), which is how this finds it. Any other
    ``start_response`` (another server) is left as it is.
    """

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            response = getattr(start_response, "__self__", None)
            if must_close(environ) and isinstance(response, Response):
                response.force_close()
            return start_response(status, headers, exc_info)

        return application(environ, start)

    return app


class ProblemJsonThreadWorker(ThreadWorker):
    """gunicorn's ``gthread`` worker whose own error answers are problem+json.

    ``handle_error`` lets gunicorn's own ``handle_error`` run against a
    stand-in socket: gunicorn still decides the status (its mapping of parse
    errors to 400, 414, 431, 501 and the rest stays the one source, kept
    current with gunicorn), logs the error and writes its access log line;
    only its HTML answer is discarded. The status is read back from the
    captured status line and answered as problem+json (a status without a
    code of its own here as 500 InternalError) with a fresh trace id, also
    sent as ``X-Request-ID`` and logged, and ``Connection: close`` (gunicorn
    closes the connection after any error). Nothing the client sent is echoed.

    The application is wrapped by :func:`closing_when_asked`.
    """

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.wsgi: WsgiApp = closing_when_asked(self.wsgi)

    def handle_quit(self, sig: int, frame: Any) -> None:
        """Quit (SIGINT, SIGQUIT) by leaving the main loop, as SIGTERM does.

        gthread's own handler shuts its thread pool down and raises
        ``SystemExit``, from the signal handler. But a handler runs in the
        main thread between any two of its steps, also while that thread
        holds a lock: the pool's, while it hands a request over, or a log
        handler's. Shutting the pool down then waited for the main thread
        itself, and an exception raised there could leave a lock taken that
        Python's exit then waited for; either way the worker hung until the
        arbiter killed it after ``graceful_timeout`` (30 s). So this handler
        takes no lock and raises nothing: it only clears ``alive``. The main
        loop sees it within a second, stops accepting, lets requests in flight
        finish (kept-alive connections linger 2 s at most) and returns, and
        the worker exits the ordinary way.
        """
        if self.alive:
            self.alive: bool = False
            self.cfg.worker_int(self)

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        captured = _CapturedAnswer()
        super().handle_error(req, captured, addr, exc)
        status = captured.status() or 500
        answer, trace_id = problem_answer(status)
        self.log.info("Refused a request with %d, traceId=%s", status, trace_id)
        try:
            util.write_nonblock(client, answer)
        except Exception:
            # As gunicorn does: the client may be gone already.
            self.log.debug("Failed to send error message.")
