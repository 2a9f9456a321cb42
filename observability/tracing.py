"""The trace of the request (or task) being served: the ``traceId`` of errors and logs.

A request joins its caller's trace when it carries a valid W3C
``traceparent`` (Trace Context §3.2); otherwise the trace is the client's
``X-Request-ID``, or a new one (api.middleware). The trace goes on into the
tasks the request publishes: their messages carry its id and a
``traceparent`` (:func:`message_headers`), which the worker binds
(config/celery.py).

Spans are exported only when OpenTelemetry is configured
(observability.exporting, observability/otel.py). Until then nothing
of OpenTelemetry is imported, and :func:`span` costs a function call.
"""

import contextlib
import contextvars
import re
import secrets
import uuid
from contextlib import AbstractContextManager
from typing import NamedTuple, Protocol

_trace_id: contextvars.ContextVar[str] = contextvars.ContextVar("trace_id", default="")

# The message header that carries the trace id of the request that
# published the message (operations.outbox.publish).
TRACE_ID_HEADER = "trace_id"
TRACEPARENT_HEADER = "traceparent"


def new_trace_id() -> str:
    """A fresh trace id, valid as a W3C one: 32 lowercase hex digits, never all zeros."""
    # uuid4's version nibble is 4, so the hex is never all zeros.
    return uuid.uuid4().hex


def current_trace_id() -> str:
    """The bound trace id, or a fresh one outside any request."""
    return _trace_id.get() or new_trace_id()


def bind_trace_id(trace_id: str) -> contextvars.Token[str]:
    return _trace_id.set(trace_id)


def reset_trace_id(token: contextvars.Token[str]) -> None:
    _trace_id.reset(token)


# --- W3C Trace Context ------------------------------------------------------


class TraceParent(NamedTuple):
    """The fields of a ``traceparent`` that this service reads."""

    trace_id: str
    parent_id: str
    flags: str


# version "-" trace-id "-" parent-id "-" trace-flags, lowercase hex only
# (HEXDIGLC): an uppercase id is not the same id, so it is not one at all.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_W3C_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_NO_TRACE_ID = "0" * 32
_NO_PARENT_ID = "0" * 16


def parse_traceparent(header: str) -> TraceParent | None:
    """The fields of a valid ``traceparent`` header, or None for anything else.

    Version ``00`` is exactly its four fields. A higher version is read by
    its first four, which may be followed only by ``-`` and whatever that
    version adds (§3.2.4); version ``ff`` is invalid, and so is an all-zero
    trace id or parent id. An invalid header is ignored, as if absent: the
    request starts a trace of its own.

    Not OpenTelemetry's ``TraceContextTextMapPropagator``, weighed for it:
    it gives the same verdicts (tests/observability/test_tracing.py holds
    this parser to it, header by header), but it would import OpenTelemetry
    into every process that runs with tracing off, and builds a context and
    a span for each header read (what each costs: docs/SCALING.md, "What
    every request pays"). It also takes a header that ends in a line break,
    which this one refuses.
    """
    # HTTP's optional whitespace around a field value is not part of it.
    header = header.strip(" \t")
    match = _TRACEPARENT.match(header)
    if match is None:
        return None
    version, trace_id, parent_id, flags = match.groups()
    rest = header[match.end() :]
    if version == "ff" or (rest and (version == "00" or not rest.startswith("-"))):
        return None
    if trace_id == _NO_TRACE_ID or parent_id == _NO_PARENT_ID:
        return None
    return TraceParent(trace_id, parent_id, flags)


def is_w3c_trace_id(trace_id: str) -> bool:
    """Whether the id can name a W3C trace (a client's ``X-Request-ID`` may not)."""
    return trace_id != _NO_TRACE_ID and _W3C_TRACE_ID.fullmatch(trace_id) is not None


def request_trace_id(traceparent: str, *, request_id: str = "") -> str:
    """The trace of a request: its caller's, else the client's request id, else a new one.

    ``traceparent`` is the request's header ("" if none); ``request_id`` the
    client's ``X-Request-ID`` if it sent a sane one (CONTRACT §2).
    """
    joined = parse_traceparent(traceparent) if traceparent else None
    if joined is None and request_id:
        return request_id
    if _backend is not None and (exported := _backend.trace_id()):
        # The request's span has begun (its middleware runs first) and read
        # the same header: the ids of errors and logs are the exported ones.
        return exported
    return joined.trace_id if joined is not None else new_trace_id()


def message_headers(trace_id: str) -> dict[str, str]:
    """The headers that carry ``trace_id`` into a task's message.

    ``traceparent`` only when the id is a W3C one; its parent id stands for
    the publication, and it says "sampled". When spans are exported, the
    Celery instrumentation writes the publication's real span over it.
    """
    headers = {TRACE_ID_HEADER: trace_id}
    if is_w3c_trace_id(trace_id):
        headers[TRACEPARENT_HEADER] = f"00-{trace_id}-{_new_parent_id()}-01"
    return headers


def trace_id_of_message(trace_id: str | None, traceparent: str | None) -> str:
    """The trace a task's message belongs to: its ``trace_id``, its ``traceparent``'s, or new."""
    if trace_id:
        return trace_id
    joined = parse_traceparent(traceparent) if traceparent else None
    return joined.trace_id if joined is not None else new_trace_id()


def _new_parent_id() -> str:
    while (parent_id := secrets.token_hex(8)) == _NO_PARENT_ID:
        pass
    return parent_id


# --- Spans ------------------------------------------------------------------


class SpanBackend(Protocol):
    """What observability.otel provides once it is configured."""

    def span(
        self, name: str, attributes: dict[str, str | int] | None
    ) -> AbstractContextManager[None]: ...

    def trace_id(self) -> str:
        """The current span's trace id; "" when there is none."""
        ...

    def continued(self, trace_id: str) -> AbstractContextManager[None]:
        """Make ``trace_id`` the current trace in the block, unless it is already."""
        ...

    def flush(self) -> None: ...


_backend: SpanBackend | None = None
# One no-op context manager for every span while nothing is exported:
# nullcontext keeps no state, so it can be entered any number of times at once.
_NO_SPAN: AbstractContextManager[None] = contextlib.nullcontext()


def span(name: str, attributes: dict[str, str | int] | None = None) -> AbstractContextManager[None]:
    """A span of the current trace around the block, exported when tracing is on."""
    if _backend is None:
        return _NO_SPAN
    return _backend.span(name, attributes)


def continued(trace_id: str) -> AbstractContextManager[None]:
    """Spans started in the block belong to ``trace_id`` (a republished operation's).

    A no-op when nothing is exported, or when the id is not a W3C one.
    """
    if _backend is None or not is_w3c_trace_id(trace_id):
        return _NO_SPAN
    return _backend.continued(trace_id)


def use_backend(backend: SpanBackend | None) -> None:
    """Export spans through ``backend`` from now on (None: stop); observability.otel's."""
    global _backend
    _backend = backend


def flush_spans() -> None:
    """Export the spans still buffered: before a process that may skip atexit ends."""
    if _backend is not None:
        _backend.flush()
