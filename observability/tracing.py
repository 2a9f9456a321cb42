"""The id of the request (or task) being served: the ``traceId`` of errors and logs."""

import contextlib
import contextvars
import uuid
from collections.abc import Iterator

_trace_id: contextvars.ContextVar[str] = contextvars.ContextVar("trace_id", default="")


def new_trace_id() -> str:
    return uuid.uuid4().hex


def current_trace_id() -> str:
    """The bound trace id, or a fresh one outside any request."""
    return _trace_id.get() or new_trace_id()


def bind_trace_id(trace_id: str) -> contextvars.Token[str]:
    return _trace_id.set(trace_id)


def reset_trace_id(token: contextvars.Token[str]) -> None:
    _trace_id.reset(token)


@contextlib.contextmanager
def span(name: str, attributes: dict[str, str | int] | None = None) -> Iterator[None]:
    """A span of the current trace around the block; none is recorded yet."""
    yield
