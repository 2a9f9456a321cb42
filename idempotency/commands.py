"""Idempotent commands: claim the key, execute once, store and replay the answer.

``@idempotent_command`` makes a view method one. Its request is read first
(a key, a JSON body with its media type, no query string); a refusal there
is answered and stored nowhere. Then, for key K and fingerprint F:

0. Find K's answered record (one indexed read, no transaction). Found and
   not expired: with the same F, replay its stored bytes; with another F,
   answer a conflict. Nothing executes, is written or is locked.
1. Not found: in one transaction, claim K, inserting its row unless K
   exists. The unique constraint arbitrates: if another request holds K
   uncommitted, the claim waits (at most ``IDEMPOTENCY_WAIT``) for it to
   commit (ours then inserts nothing) or roll back (ours then inserts).
2. Inserted: K is ours if the principal's stored keys leave room (else 429,
   idempotency/quota.py). Run the view, insert its answer beside the claim
   and add the key's bytes to the principal's total: the effects, the claim
   and the answer commit together, or not at all.
3. Not inserted (K was answered since step 0, or while ours waited): find
   K's record and answer as in step 0. The claim wrote and locked nothing.

A command failing in its own code is a final answer: its transaction rolls
back, and a second one claims K and stores the error response. One under
which the database failed, or that answers 503, stores nothing: a retry executes it once.
idempotency/statements.py says how each step reaches the database.
"""

import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Concatenate, ParamSpec, TypeAlias, TypeVar, overload

import structlog
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections, transaction
from django.db.backends.utils import CursorWrapper
from django.http import HttpResponse
from django.utils import timezone
from rest_framework.exceptions import ParseError, UnsupportedMediaType, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import principal_of
from accounts.models import Principal
from api.errors import ApplicationError, ServiceUnavailable, database_unavailable, render_exception
from idempotency import errors, policy, quota, statements
from idempotency.fingerprint import Fingerprint, fingerprint_request, mismatched_pointers
from idempotency.headers import HEADER, key_digest, parse_idempotency_key
from idempotency.metrics import COMMAND_DURATION, IDEMPOTENCY_OUTCOMES
from idempotency.models import IdempotencyKey
from observability.tracing import span

REPLAYED_HEADER = "Idempotent-Replayed"
# The response's headers that are part of its answer (not X-Request-ID, Vary…).
STORED_HEADERS = ("Location", "Retry-After")
# A stored answer's bound (rule 12); beyond it, a bug: rolled back, answered 500.
MAX_STORED_RESPONSE_BYTES = quota.MAX_ANSWER_BYTES
MAX_STORED_REFUSAL_BYTES = quota.MAX_REFUSAL_BYTES
NO_QUERY_STRING = "A command takes no query string: send its parameters in the body, or none."

ReplayHook = Callable[[IdempotencyKey, HttpResponse], HttpResponse]
V = TypeVar("V", bound=APIView)
P = ParamSpec("P")
# A view method as declared, and as idempotent (a replay is a plain HttpResponse).
View: TypeAlias = Callable[Concatenate[V, Request, P], Response]
CommandView: TypeAlias = Callable[Concatenate[V, Request, P], HttpResponse]
# A claim: our new row's id, and the row of the principal's total (quota.py) it adds to.
_Claim: TypeAlias = tuple[int, statements.Row]


@dataclass(frozen=True)
class Command:
    """One request to run as an idempotent command."""

    principal: Principal
    key: str
    method: str
    path: str
    fingerprint: Fingerprint


@overload
def idempotent_command(view_method: View[V, P]) -> CommandView[V, P]: ...
@overload
def idempotent_command(
    *, on_replay: ReplayHook | None
) -> Callable[[View[V, P]], CommandView[V, P]]: ...
def idempotent_command(
    view_method: View[V, P] | None = None, *, on_replay: ReplayHook | None = None
) -> CommandView[V, P] | Callable[[View[V, P]], CommandView[V, P]]:
    """Make a DRF view method an idempotent command (docs/SPECIFICATION.md §3).

    ``on_replay(record, response)`` may amend a replay: asynchronous commands report progress.
    """

    def decorate(method: View[V, P]) -> CommandView[V, P]:
        @functools.wraps(method)
        def handle(view: V, request: Request, /, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
            def execute() -> HttpResponse:
                response = method(view, request, *args, **kwargs)
                response = view.finalize_response(request, response, *args, **kwargs)
                response.render()
                return response

            name, started, outcome = command_name(request), time.perf_counter(), Outcome.REFUSED
            try:
                response, outcome = run_command(_read_command(request), execute, on_replay)
            except ApplicationError as exc:
                outcome = _OUTCOME_OF_REFUSAL.get(exc.code, outcome)
                raise
            except Exception as exc:
                if database_unavailable(exc):
                    outcome = Outcome.UNAVAILABLE
                raise
            finally:
                IDEMPOTENCY_OUTCOMES.labels(name, outcome).inc()
                COMMAND_DURATION.labels(name).observe(time.perf_counter() - started)
                structlog.contextvars.bind_contextvars(
                    command=name,
                    idempotency_outcome=outcome,
                    idempotency_key_digest=key_digest(request.headers.get(HEADER)),
                )
            return response

        handle.idempotent_command = True  # type: ignore[attr-defined]
        return handle

    return decorate(view_method) if view_method is not None else decorate


# What the idempotency layer did with a command (a metric label, a log field). "refused":
# before it started, for another reason (query string, media type, JSON); "unavailable": 503.
Outcome = StrEnum(
    "Outcome",
    "EXECUTED REPLAYED CONFLICT IN_PROGRESS MISSING_KEY INVALID_KEY QUOTA_EXCEEDED"
    " REFUSED UNAVAILABLE",
)
_OUTCOME_OF_REFUSAL = {
    ServiceUnavailable.code: Outcome.UNAVAILABLE,
    errors.IdempotencyKeyRequired.code: Outcome.MISSING_KEY,
    errors.IdempotencyKeyInvalid.code: Outcome.INVALID_KEY,
    errors.IdempotencyKeyConflict.code: Outcome.CONFLICT,
    errors.IdempotencyKeyInProgress.code: Outcome.IN_PROGRESS,
    errors.KeyQuotaExceeded.code: Outcome.QUOTA_EXCEEDED,
}


def command_name(request: Request) -> str:
    """``POST /v1/orders/{order_id}/cancel``: the route, not the path, to keep labels few."""
    match = request.resolver_match
    route = _route_template(match.route) if match is not None else request.path
    return f"{request.method} /{route.lstrip('/')}"


# The URL configuration's routes are few and fixed: each is rewritten once.
@functools.lru_cache(maxsize=256)
def _route_template(route: str) -> str:
    return re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


def _read_command(request: Request) -> Command:
    """What is checked before the command starts; each refusal is answered and not stored.

    :raises IdempotencyKeyRequired, IdempotencyKeyInvalid: no key, or not a valid one.
    :raises ValidationError: a query string, which no command reads (rule 3).
    :raises UnsupportedMediaType, ParseError: a body with no media type, or not canonical.
    """
    key = parse_idempotency_key(request.headers.get(HEADER))
    if request.META.get("QUERY_STRING"):
        # Ignored, ``?dryRun=1`` would run for real, or replay an answer that says it did.
        raise ValidationError({"query": [NO_QUERY_STRING]})
    if request.META.get("CONTENT_LENGTH", "0") not in ("", "0") and not request.content_type:
        # DRF would silently ignore a body it has no media type for.
        raise UnsupportedMediaType("", detail="A body needs a Content-Type: application/json.")
    method, path = request.method or "", request.path
    try:
        fingerprint = fingerprint_request(method=method, path=path, body=request.data)
    except ValueError:
        # Never for I-JSON, all the parser admits: this guards that promise.
        raise ParseError("The body has no canonical JSON form (RFC 8785).") from None
    return Command(principal_of(request), key, method, path, fingerprint)


def run_command(
    command: Command, execute: Callable[[], HttpResponse], on_replay: ReplayHook | None = None
) -> tuple[HttpResponse, Outcome]:
    """Execute ``execute`` at most once per key, and answer every copy alike.

    :raises IdempotencyKeyConflict: the key was used for another request.
    :raises IdempotencyKeyInProgress: the key's first request is still running.
    :raises KeyQuotaExceeded: the key is new, and the principal's keys fill its storage.
    """
    answered = _find(command)
    if answered is not None:
        return _replay(command, answered, on_replay), Outcome.REPLAYED
    try:
        return _claim_then_store(command, lambda: _execute(execute), on_replay)
    except _CommandFailed as failed:
        # Rolled back, effects and claim: the failure is stored on its own.
        answer = _answer_of(render_exception(failed.__cause__ or failed))
    if (too_large := _too_large(answer)) is not None:
        answer = _answer_of(render_exception(too_large))
    return _claim_then_store(command, lambda: answer, on_replay)


def _claim_then_store(
    command: Command, answer: Callable[[], statements.Row], on_replay: ReplayHook | None
) -> tuple[HttpResponse, Outcome]:
    """In one transaction, claim the key and store ``answer()``, or replay the key's record.

    :raises _CommandFailed: from ``answer()``; the transaction rolled back.
    """
    db = connections[DEFAULT_DB_ALIAS]
    # Only the outermost block's end commits: the store is then its last statement.
    outermost = not db.in_atomic_block
    with transaction.atomic(), db.cursor() as cursor:
        with span("idempotency.claim"):
            found = _claim_or_find(cursor, command)
        if isinstance(found, IdempotencyKey):
            # Answered meanwhile (perhaps between a failure's two transactions).
            return _replay(command, found, on_replay), Outcome.REPLAYED
        stored = answer()
        with span("idempotency.store"):
            stored["key_id"], usage = found
            usage["bytes"] += quota.answer_bytes(stored["body"], stored["headers"])
            statements.store(cursor, stored, usage, ends_transaction=outermost)
    response = HttpResponse(stored["body"], status=stored["status"], headers=stored["headers"])
    return response, Outcome.EXECUTED


class _CommandFailed(Exception):
    """The command failed in its own code; ``__cause__`` is why. A final answer."""


class _AnswerTooLarge(Exception):
    """A command answered more than its status may store: a bug in the command."""


def _execute(execute: Callable[[], HttpResponse]) -> statements.Row:
    """The command's answer.

    :raises _CommandFailed: the command failed in its own code, or answered too much.
    """
    try:
        answer = _answer_of(execute())
        if (too_large := _too_large(answer)) is not None:
            raise too_large
    except (OperationalError, InterfaceError, ServiceUnavailable):
        raise  # our side failed under it, not for good: nothing is stored (rule 5)
    except Exception as exc:
        raise _CommandFailed() from exc
    return answer


def _answer_of(response: HttpResponse) -> statements.Row:
    """A command's response as its ``StoredAnswer`` row stores it, its key still to be set."""
    stored = {name: response[name] for name in STORED_HEADERS if response.has_header(name)}
    headers = {"Content-Type": response["Content-Type"], **stored}
    return {"status": response.status_code, "body": response.content, "headers": headers}


def _too_large(answer: statements.Row) -> "_AnswerTooLarge | None":
    """The bug of an answer larger than a stored answer of its status may be (rule 12)."""
    status, size = answer["status"], len(answer["body"])
    limit = MAX_STORED_REFUSAL_BYTES if 400 <= status < 500 else MAX_STORED_RESPONSE_BYTES
    return _AnswerTooLarge(status, size) if size > limit else None


def _claim_or_find(cursor: CursorWrapper, command: Command) -> _Claim | IdempotencyKey:
    """Claim the key, or find the answered record that holds it.

    :raises KeyQuotaExceeded: the key is new and does not fit (rule 12).
    :raises IdempotencyKeyInProgress: another request held it for ``IDEMPOTENCY_WAIT``.
    """
    principal, digests = command.principal, command.fingerprint.field_digests
    # Three rounds: the key may be found expired, or purged meanwhile, and is claimed anew.
    for _ in range(3):
        now = timezone.now()
        record: statements.Row = {
            "tenant_id": principal.tenant_id,
            "principal_id": principal.pk,
            "key": command.key,
            "request_method": command.method,
            "request_path": command.path,
            "fingerprint": command.fingerprint.digest,
            "field_digests": digests,
            "created_at": now,
            "expires_at": now + policy.key_ttl(),
        }
        try:
            claimed = statements.claim(cursor, record)
        except statements.WaitTimedOut:
            break
        if claimed is not None:
            held = quota.claim_bytes(
                key=command.key, method=command.method, path=command.path, field_digests=digests
            )
            if not quota.admits(claimed.used, held):
                wait = quota.usage_of(principal, now=timezone.now(), claim=held).retry_after
                raise errors.KeyQuotaExceeded(headers={"Retry-After": str(wait)})
            return claimed.id, {
                "principal_id": principal.pk,
                "expires_by": quota.bucket_end(record["expires_at"]),
                "shard": quota.shard(cursor.db),
                "bytes": held,
            }
        found = _find(command)
        if found is not None:
            return found
    raise errors.IdempotencyKeyInProgress(headers={"Retry-After": policy.in_progress_retry_after()})


def _find(command: Command) -> IdempotencyKey | None:
    """The key's answered record, unless it has expired (and is forgotten, if not claimed anew)."""
    record = statements.find(command.principal, command.key)
    if record is not None and record.is_expired:
        # Conditional on expiry, so a key claimed anew meanwhile is kept; its answer goes with it.
        IdempotencyKey.objects.filter(pk=record.pk, expires_at__lte=timezone.now()).delete()
        return None
    return record


def _replay(command: Command, record: IdempotencyKey, on_replay: ReplayHook | None) -> HttpResponse:
    """The record's stored answer, marked as a replay.

    :raises IdempotencyKeyConflict: the record was made by another request.
    """
    if record.fingerprint != command.fingerprint.digest:
        raise _conflict(command, record)
    answer = record.answer
    response = HttpResponse(bytes(answer.body), status=answer.status, headers=answer.headers)
    response[REPLAYED_HEADER] = "true"
    return on_replay(record, response) if on_replay is not None else response


def _conflict(command: Command, record: IdempotencyKey) -> errors.IdempotencyKeyConflict:
    """The refusal of a key reused for another request, naming what differs."""
    mismatch = []
    if record.request_method != command.method:
        mismatch.append("/method")
    if record.request_path != command.path:
        mismatch.append("/path")
    ours = command.fingerprint.field_digests
    if not mismatch or record.field_digests != ours:
        mismatch.extend(mismatched_pointers(record.field_digests, ours))
    return errors.IdempotencyKeyConflict(
        details={"mismatch": mismatch}, extra={"idempotencyKey": command.key}
    )
