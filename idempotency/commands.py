"""Idempotent commands: claim the key, execute once, store and replay the answer.

A view method becomes an idempotent command with one line::

    @idempotent_command
    def post(self, request: Request) -> Response: ...

The protocol, for a request with key K and fingerprint F:

1. Look K up (one indexed read, no lock, no write). A completed K with the
   same F is replayed from its stored bytes; with another F it is a
   conflict. Nothing executes in either case.
2. Otherwise, in one transaction: INSERT the claim of K. The unique
   constraint arbitrates: if another request holds K uncommitted, the
   INSERT waits (at most ``IDEMPOTENCY_WAIT``) for it to commit (our INSERT
   then fails and we go back to 1 and replay) or to roll back (ours then
   succeeds). Then run the view inside a savepoint and store its response
   (status, body bytes, Content-Type, Location) on the claim. Commit: the
   effects, the claim and the response become visible together, or not at
   all.

A command that fails in its own code is a final answer like any other: its
effects are rolled back to the savepoint and the error response is stored.
A command under which the database itself failed (connection lost,
deadlock, serialization failure, a lock wait that timed out) commits
nothing and stores nothing, so a retry executes it once.
"""

import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import structlog
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.http import HttpResponse
from django.utils import timezone
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts.authentication import principal_of
from accounts.models import Principal
from api.errors import ApplicationError, render_exception
from idempotency import policy
from idempotency.errors import (
    IdempotencyKeyConflict,
    IdempotencyKeyInProgress,
    IdempotencyKeyInvalid,
    IdempotencyKeyRequired,
)
from idempotency.fingerprint import Fingerprint, fingerprint_request, mismatched_pointers
from idempotency.headers import HEADER, parse_idempotency_key
from idempotency.metrics import COMMAND_DURATION, IDEMPOTENCY_OUTCOMES
from idempotency.models import IdempotencyKey

REPLAYED_HEADER = "Idempotent-Replayed"
# Headers of a command's response that are part of its answer and replayed
# with it. Everything else (X-Request-ID, Vary…) belongs to each exchange.
STORED_HEADERS = ("Location", "Retry-After")
# SQLSTATE of a lock wait cut short by lock_timeout.
_LOCK_NOT_AVAILABLE = "55P03"
# A stored answer is kept for IDEMPOTENCY_KEY_TTL and replayed on demand, so
# its size is bounded: the largest answer a command gives is an order of 100
# lines (about 15 KB) or a validation error naming five unknown members in
# each of 100 lines (about 50 KB). A command whose answer exceeds this has a
# bug; it is rolled back and answered 500, which is stored like any final
# failure of a command's own code.
MAX_STORED_RESPONSE_BYTES = 64 * 1024

ReplayHook = Callable[[IdempotencyKey, HttpResponse], HttpResponse]
V = TypeVar("V", bound=APIView)


@dataclass(frozen=True)
class Command:
    """One request to run as an idempotent command."""

    principal: Principal
    key: str
    method: str
    path: str
    fingerprint: Fingerprint


def idempotent_command(
    view_method: Callable[..., Any] | None = None, *, on_replay: ReplayHook | None = None
) -> Any:
    """Make a DRF view method an idempotent command (contract section 3).

    ``on_replay(record, response)`` may amend a replay before it is sent;
    asynchronous commands use it to report their operation's current status.
    """

    def decorate(method: Callable[..., Any]) -> Callable[..., HttpResponse]:
        @functools.wraps(method)
        def wrapper(view: V, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
            def execute() -> HttpResponse:
                response = method(view, request, *args, **kwargs)
                response = view.finalize_response(request, response, *args, **kwargs)
                response.render()
                return response

            name = command_name(request)
            started = time.perf_counter()
            outcome = Outcome.REFUSED
            try:
                response, outcome = run_command(
                    _read_command(request), execute, on_replay=on_replay
                )
            except ApplicationError as exc:
                outcome = _OUTCOME_OF_REFUSAL.get(type(exc), outcome)
                raise
            finally:
                IDEMPOTENCY_OUTCOMES.labels(name, outcome).inc()
                COMMAND_DURATION.labels(name).observe(time.perf_counter() - started)
                # For the request's log line (api.middleware).
                structlog.contextvars.bind_contextvars(command=name, idempotency_outcome=outcome)
            return response

        wrapper.idempotent_command = True  # type: ignore[attr-defined]
        return wrapper

    return decorate(view_method) if view_method is not None else decorate


class Outcome(StrEnum):
    """What the idempotency layer did with a command (a metric label and log field)."""

    EXECUTED = "executed"
    REPLAYED = "replayed"
    CONFLICT = "conflict"
    IN_PROGRESS = "in_progress"
    MISSING_KEY = "missing_key"
    INVALID_KEY = "invalid_key"
    # Refused before it started for another reason: media type, JSON.
    REFUSED = "refused"


_OUTCOME_OF_REFUSAL = {
    IdempotencyKeyRequired: Outcome.MISSING_KEY,
    IdempotencyKeyInvalid: Outcome.INVALID_KEY,
    IdempotencyKeyConflict: Outcome.CONFLICT,
    IdempotencyKeyInProgress: Outcome.IN_PROGRESS,
}


_PATH_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def command_name(request: Request) -> str:
    """``POST /v1/orders/{order_id}/cancel``: the route, not the path, to keep labels few."""
    match = request.resolver_match
    route = _PATH_PARAMETER.sub(r"{\1}", match.route) if match is not None else request.path
    return f"{request.method} /{route.lstrip('/')}"


def _read_command(request: Request) -> Command:
    """Everything about the request that is checked before the command starts.

    Each refusal here (key, media type, JSON) is answered and not stored:
    nothing has executed, and the same request gets the same answer anyway.
    """
    key = parse_idempotency_key(request.headers.get(HEADER))
    if request.META.get("CONTENT_LENGTH", "0") not in ("", "0") and not request.content_type:
        # DRF would silently ignore a body it has no media type for.
        raise UnsupportedMediaType("", detail="A body needs a Content-Type: application/json.")
    method, path = request.method or "", request.path
    try:
        fingerprint = fingerprint_request(method=method, path=path, body=request.data)
    except ValueError:
        # The parser admits only I-JSON, which always has a canonical form;
        # this guards the promise that no such body reaches a command.
        raise ParseError("The body has no canonical JSON form (RFC 8785).") from None
    return Command(
        principal=principal_of(request),
        key=key,
        method=method,
        path=path,
        fingerprint=fingerprint,
    )


def run_command(
    command: Command,
    execute: Callable[[], HttpResponse],
    *,
    on_replay: ReplayHook | None = None,
) -> tuple[HttpResponse, Outcome]:
    """Execute ``execute`` at most once per key, and answer every copy alike.

    :raises IdempotencyKeyConflict: the key was used for another request.
    :raises IdempotencyKeyInProgress: the key's first request is still running.
    """
    # Two rounds at most: a key that expired, or whose holder committed while
    # we waited, is looked up once more.
    for _ in range(2):
        record = _lookup(command)
        if record is not None and record.is_expired:
            _forget(record)
            record = None
        if record is not None:
            return _replay(command, record, on_replay), Outcome.REPLAYED
        try:
            record = _claim_and_execute(command, execute)
        except _KeyTaken:
            continue
        return _response_from(record, replayed=False), Outcome.EXECUTED
    raise IdempotencyKeyInProgress(headers={"Retry-After": policy.in_progress_retry_after()})


class _KeyTaken(Exception):
    """Another request committed this key while we were claiming it."""


class _AnswerTooLarge(Exception):
    """A command answered more than MAX_STORED_RESPONSE_BYTES: a bug in the command."""


def _lookup(command: Command) -> IdempotencyKey | None:
    return IdempotencyKey.objects.filter(
        tenant_id=command.principal.tenant_id, principal=command.principal, key=command.key
    ).first()


def _forget(record: IdempotencyKey) -> None:
    # Conditional on expiry, so a key claimed anew meanwhile is kept.
    IdempotencyKey.objects.filter(pk=record.pk, expires_at__lte=timezone.now()).delete()


def _claim_and_execute(command: Command, execute: Callable[[], HttpResponse]) -> IdempotencyKey:
    with transaction.atomic():
        _bound_waits()
        record = _claim(command)
        try:
            with transaction.atomic():
                response = execute()
                if len(response.content) > MAX_STORED_RESPONSE_BYTES:
                    raise _AnswerTooLarge(len(response.content))
        except (OperationalError, InterfaceError):
            # The database failed under the command: roll everything back,
            # the claim included, and let the client retry.
            raise
        except Exception as exc:
            response = render_exception(exc)
        _store(record, response)
        return record


def _bound_waits() -> None:
    """Bound how long this transaction waits for locks and may hold them.

    ``lock_timeout`` turns a wait for another request's claim into an error
    after ``IDEMPOTENCY_WAIT``; ``statement_timeout`` and
    ``idle_in_transaction_session_timeout`` make PostgreSQL end a command
    that hangs with its claim for longer than ``IDEMPOTENCY_LOCK_TIMEOUT``.
    All three end with the transaction. SQLite has no equivalents: there
    the connection's busy timeout bounds the wait for its one writer.
    """
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('lock_timeout', %s, true),"
            " set_config('statement_timeout', %s, true),"
            " set_config('idle_in_transaction_session_timeout', %s, true)",
            [
                _milliseconds(policy.wait_seconds()),
                _milliseconds(policy.lock_timeout_seconds()),
                _milliseconds(policy.lock_timeout_seconds()),
            ],
        )


def _claim(command: Command) -> IdempotencyKey:
    now = timezone.now()
    try:
        # A savepoint of its own would cost two round trips; none is needed,
        # because a failed claim abandons the whole transaction.
        return IdempotencyKey.objects.create(
            tenant_id=command.principal.tenant_id,
            principal=command.principal,
            key=command.key,
            request_method=command.method,
            request_path=command.path,
            fingerprint=command.fingerprint.digest,
            field_digests=command.fingerprint.field_digests,
            created_at=now,
            expires_at=now + policy.key_ttl(),
        )
    except IntegrityError:
        raise _KeyTaken() from None
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
            raise IdempotencyKeyInProgress(
                headers={"Retry-After": policy.in_progress_retry_after()}
            ) from None
        raise


def _store(record: IdempotencyKey, response: HttpResponse) -> None:
    record.response_status = response.status_code
    record.response_body = response.content
    record.response_headers = {
        "Content-Type": response["Content-Type"],
        **{name: response[name] for name in STORED_HEADERS if response.has_header(name)},
    }
    record.save(update_fields=["response_status", "response_body", "response_headers"])


def _replay(command: Command, record: IdempotencyKey, on_replay: ReplayHook | None) -> HttpResponse:
    if record.fingerprint != command.fingerprint.digest:
        raise _conflict(command, record)
    return _response_from(record, replayed=True, on_replay=on_replay)


def _conflict(command: Command, record: IdempotencyKey) -> IdempotencyKeyConflict:
    mismatch = []
    if record.request_method != command.method:
        mismatch.append("/method")
    if record.request_path != command.path:
        mismatch.append("/path")
    if not mismatch or record.field_digests != command.fingerprint.field_digests:
        mismatch.extend(
            mismatched_pointers(record.field_digests, command.fingerprint.field_digests)
        )
    return IdempotencyKeyConflict(
        details={"mismatch": mismatch}, extra={"idempotencyKey": command.key}
    )


def _response_from(
    record: IdempotencyKey, *, replayed: bool, on_replay: ReplayHook | None = None
) -> HttpResponse:
    response = HttpResponse(bytes(record.response_body), status=record.response_status)
    for name, value in record.response_headers.items():
        response[name] = value
    if replayed:
        response[REPLAYED_HEADER] = "true"
        if on_replay is not None:
            response = on_replay(record, response)
    return response


def _milliseconds(seconds: float) -> str:
    return f"{int(seconds * 1000)}ms"
