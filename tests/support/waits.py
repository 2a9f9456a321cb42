"""Waits on what offers no event to wait on, which say what they saw when they run out.

Servers such as Patroni, etcd, HAProxy or gunicorn announce nothing a test
could wait on but their answers, and the database tells a waiting lock or a
finished operation only when asked: these are polled. A wait that runs out
says what it waited on, the last answer it got (a status and a body, a
value, an exception) and what the servers of the test say
(tests/support/servers.py), never only that the time ran out.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import requests

from tests.support import servers

T = TypeVar("T")

# A body is read for its start.
_BODY_CHARS = 300


@dataclass(frozen=True)
class Answer:
    """What one poll saw: whether it is what the wait wants, and what it was, in words."""

    holds: bool
    seen: str

    def __bool__(self) -> bool:
        return self.holds

    def __str__(self) -> str:
        return self.seen


def describe(value: object) -> str:
    """A poll's answer in words: a response's status and body, an exception, a value."""
    if isinstance(value, Answer):
        return value.seen
    if isinstance(value, requests.Response):
        body = value.text[:_BODY_CHARS]
        return f"{value.status_code} {value.reason}: {body}" if body else str(value.status_code)
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"[:_BODY_CHARS]
    return repr(value)[:_BODY_CHARS]


def http_answer(url: str, *, status: int = 200, timeout: float = 2) -> Answer:
    """``GET url``: holds if it answers ``status``; what it answered, or why it did not."""
    try:
        response = requests.get(url, timeout=timeout)
    except requests.RequestException as error:
        return Answer(False, f"GET {url}: {describe(error)}")
    return Answer(response.status_code == status, f"GET {url}: {describe(response)}")


def wait_for(
    read: Callable[[], T],
    until: Callable[[T], object] = bool,
    timeout: float = 10.0,
    *,
    interval: float = 0.01,
    what: str,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``read()`` until ``until`` holds of what it returns; that value.

    An exception of a type in ``ignoring`` is an answer too (a server not
    listening yet): the poll goes on. Past ``timeout`` seconds the wait
    fails with ``what``, the last answer and the servers' evidence.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = read()
        except ignoring as error:
            last: object = error
        else:
            if until(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(what, timeout, last))
        time.sleep(interval)


def wait_until(
    condition: Callable[[], object],
    timeout: float = 10.0,
    *,
    interval: float = 0.01,
    what: str,
    ignoring: tuple[type[BaseException], ...] = (),
) -> float:
    """Poll ``condition()`` until it is true (a value, or an :class:`Answer`); the seconds it took.

    As :func:`wait_for`, for a condition that is read only for whether it holds.
    """
    started = time.monotonic()
    wait_for(condition, bool, timeout, interval=interval, what=what, ignoring=ignoring)
    return time.monotonic() - started


def _timed_out(what: str, timeout: float, last: Any) -> str:
    message = f"{what}: not reached within {timeout:g} s; the last answer: {describe(last)}"
    evidence = servers.evidence()
    return f"{message}\n{evidence}" if evidence else message
