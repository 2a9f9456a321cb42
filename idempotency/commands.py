"""Idempotent commands: claim the key, execute once, store and replay the answer.

A view method becomes an idempotent command with one line::

    @idempotent_command
    def post(self, request: Request) -> Response: ...

The protocol, for a request with key K and fingerprint F:

0. Read K's answered record, with one indexed ``SELECT`` and no
   transaction. Found and not expired: with the same F, replay its stored
   bytes; with another F, answer a conflict. Nothing executes, nothing is
   written, no lock is taken: a retry costs what an authenticated read
   costs. Not found (a new key, or one whose first request has not
   committed): go on, in one transaction.
1. Claim K: ``INSERT … ON CONFLICT DO NOTHING``, sent with the
   transaction's ``BEGIN``. The unique constraint arbitrates. If another
   request holds K uncommitted, the INSERT waits (at most
   ``IDEMPOTENCY_WAIT``) for it to commit (ours then inserts nothing) or to
   roll back (ours then inserts).
2. Inserted: K is ours, if the principal's stored keys leave room for it
   (the claim's ``RETURNING`` reads their total; otherwise 429 and the
   claim rolls back: idempotency/quota.py). Run the view and insert its
   answer (status, body bytes, Content-Type, Location) beside the claim,
   and add the key's bytes to the principal's total, sent with the
   ``COMMIT``: the effects, the claim and the answer become visible
   together, or not at all. Neither row is ever updated.
3. Not inserted (K was answered since step 0, or its first request
   committed while ours waited): read K's record, and answer as in step 0.
   The claim attempt wrote nothing and locked nothing.

Step 0 is a shortcut, not an arbiter: a key it does not find is claimed,
and the unique constraint decides among copies as before. It costs a
first execution one read that finds nothing (docs/SCALING.md measures it).

A command that fails in its own code is a final answer like any other: its
transaction rolls back (its effects and the claim with them), and a second
transaction claims K and stores the error response. Were
another copy to claim K between the two, its answer would be K's, and ours
would be replayed from it. This failure path is rare; the path that is not,
a successful first execution, costs no savepoint.

A command under which the database itself failed (connection lost,
deadlock, serialization failure, a lock wait that timed out) commits
nothing and stores nothing, so a retry executes it once.
"""

import functools
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

import psycopg
import structlog
from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    connection,
    connections,
    transaction,
)
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, JSONField, Model, UniqueConstraint
from django.http import HttpResponse
from django.utils import timezone
from psycopg import pq
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts.authentication import principal_of
from accounts.models import Principal
from api.errors import ApplicationError, database_unavailable, render_exception
from api.plain_reads import Selected, split
from idempotency import policy, quota
from idempotency.errors import (
    IdempotencyKeyConflict,
    IdempotencyKeyInProgress,
    IdempotencyKeyInvalid,
    IdempotencyKeyRequired,
    KeyQuotaExceeded,
)
from idempotency.fingerprint import Fingerprint, fingerprint_request, mismatched_pointers
from idempotency.headers import HEADER, key_digest, parse_idempotency_key
from idempotency.metrics import COMMAND_DURATION, IDEMPOTENCY_OUTCOMES
from idempotency.models import IdempotencyKey, StorageUsage, StoredAnswer
from observability.tracing import span

REPLAYED_HEADER = "Idempotent-Replayed"
# Headers of a command's response that are part of its answer and replayed
# with it. Everything else (X-Request-ID, Vary…) belongs to each exchange.
STORED_HEADERS = ("Location", "Retry-After")
# SQLSTATE of a lock wait cut short by lock_timeout.
_LOCK_NOT_AVAILABLE = "55P03"
# A stored answer is kept for IDEMPOTENCY_KEY_TTL and replayed on demand, so
# its size is bounded (rule 12): the largest answer a command gives is an
# order of 100 lines (about 15 KB); a refusal (4xx) is at most 8 KiB, since
# a validation error names only what fits (api/errors.py). A command whose
# answer exceeds its bound has a bug; it is rolled back and answered 500,
# which is stored like any final failure of a command's own code.
MAX_STORED_RESPONSE_BYTES = quota.MAX_ANSWER_BYTES
MAX_STORED_REFUSAL_BYTES = quota.MAX_REFUSAL_BYTES

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
    """Make a DRF view method an idempotent command (docs/SPECIFICATION.md §3).

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
            except Exception as exc:
                if database_unavailable(exc):
                    outcome = Outcome.UNAVAILABLE
                raise
            finally:
                IDEMPOTENCY_OUTCOMES.labels(name, outcome).inc()
                COMMAND_DURATION.labels(name).observe(time.perf_counter() - started)
                # For the request's log line (api.middleware).
                structlog.contextvars.bind_contextvars(
                    command=name,
                    idempotency_outcome=outcome,
                    idempotency_key_digest=key_digest(request.headers.get(HEADER)),
                )
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
    QUOTA_EXCEEDED = "quota_exceeded"
    # Refused before it started for another reason: media type, JSON.
    REFUSED = "refused"
    # The database failed under it (503 ServiceUnavailable): nothing stored.
    UNAVAILABLE = "unavailable"


_OUTCOME_OF_REFUSAL = {
    IdempotencyKeyRequired: Outcome.MISSING_KEY,
    IdempotencyKeyInvalid: Outcome.INVALID_KEY,
    IdempotencyKeyConflict: Outcome.CONFLICT,
    IdempotencyKeyInProgress: Outcome.IN_PROGRESS,
    KeyQuotaExceeded: Outcome.QUOTA_EXCEEDED,
}


_PATH_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def command_name(request: Request) -> str:
    """``POST /v1/orders/{order_id}/cancel``: the route, not the path, to keep labels few."""
    match = request.resolver_match
    route = _route_template(match.route) if match is not None else request.path
    return f"{request.method} /{route.lstrip('/')}"


# The URL configuration's routes are few and fixed: each is rewritten once.
@functools.lru_cache(maxsize=256)
def _route_template(route: str) -> str:
    return _PATH_PARAMETER.sub(r"{\1}", route)


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
    :raises KeyQuotaExceeded: the key is new, and the principal's keys fill its storage.
    """
    db = connections[DEFAULT_DB_ALIAS]
    # A key already answered is replayed from one indexed read, before any
    # transaction: what a retry storm costs (:func:`_find`).
    answered = _find(command)
    if answered is not None:
        return _replay(command, answered, on_replay), Outcome.REPLAYED
    # Only the outermost block's end is a COMMIT, which the store may carry.
    outermost = not db.in_atomic_block
    try:
        # One cursor for the claim and the store.
        with transaction.atomic(), db.cursor() as cursor:
            with span("idempotency.claim"):
                found = _claim_or_find(cursor, command)
            if isinstance(found, IdempotencyKey):
                return _replay(command, found, on_replay), Outcome.REPLAYED
            answer = _execute(execute)
            with span("idempotency.store"):
                _store(cursor, found, answer, commits=outermost)
        return answer.response(), Outcome.EXECUTED
    except _CommandFailed as failed:
        # The command's effects rolled back, and the claim with them: the
        # failure is stored in a transaction of its own.
        answer = _storable(_Answer.of(render_exception(failed.__cause__ or failed)))
    with transaction.atomic(), db.cursor() as cursor:
        with span("idempotency.claim"):
            found = _claim_or_find(cursor, command)
        if isinstance(found, IdempotencyKey):
            # Another copy claimed the key between the two transactions and
            # executed it: its answer is the key's.
            return _replay(command, found, on_replay), Outcome.REPLAYED
        with span("idempotency.store"):
            _store(cursor, found, answer, commits=outermost)
    return answer.response(), Outcome.EXECUTED


@dataclass(frozen=True)
class _Answer:
    """A command's response as it is stored and replayed."""

    status: int
    body: bytes
    headers: dict[str, str]

    @classmethod
    def of(cls, response: HttpResponse) -> "_Answer":
        return cls(
            status=response.status_code,
            body=response.content,
            headers={
                "Content-Type": response["Content-Type"],
                **{name: response[name] for name in STORED_HEADERS if response.has_header(name)},
            },
        )

    def response(self) -> HttpResponse:
        return HttpResponse(self.body, status=self.status, headers=self.headers)

    @property
    def too_large(self) -> bool:
        """Larger than a stored answer of its status may be (rule 12)."""
        limit = MAX_STORED_REFUSAL_BYTES if 400 <= self.status < 500 else MAX_STORED_RESPONSE_BYTES
        return len(self.body) > limit


class _CommandFailed(Exception):
    """The command failed in its own code; ``__cause__`` is why. A final answer."""


class _AnswerTooLarge(Exception):
    """A command answered more than its status may store: a bug in the command."""


def _execute(execute: Callable[[], HttpResponse]) -> _Answer:
    try:
        answer = _Answer.of(execute())
        if answer.too_large:
            raise _AnswerTooLarge(answer.status, len(answer.body))
    except (OperationalError, InterfaceError):
        # The database failed under the command: the transaction rolls back,
        # the claim with it, and nothing is stored; a retry executes once.
        raise
    except Exception as exc:
        raise _CommandFailed() from exc
    return answer


def _storable(answer: _Answer) -> _Answer:
    """A failure's answer, or a 500 in its place if it is too large to store."""
    if answer.too_large:
        return _Answer.of(render_exception(_AnswerTooLarge(answer.status, len(answer.body))))
    return answer


# Three rounds at most: the key may be found expired (and is claimed anew),
# or deleted by the purge between our claim and our read of it.
_ROUNDS = 3


@dataclass(frozen=True)
class _Claim:
    """Our new row of the key, and what the principal's keys held when it was inserted."""

    id: int
    principal_id: int
    expires_at: datetime
    # Bytes the claim holds, and the principal's total before it (idempotency/quota.py).
    bytes: int
    used: int


def _claim_or_find(cursor: CursorWrapper, command: Command) -> _Claim | IdempotencyKey:
    """Claim the key (our new row), or find the completed record that holds it.

    :raises KeyQuotaExceeded: the key is new and does not fit (rule 12); the
        caller's transaction rolls our row back.
    """
    for _ in range(_ROUNDS):
        claimed = _claim(cursor, command)
        if claimed is not None:
            if not quota.admits(claimed.used, claimed.bytes):
                usage = quota.usage_of(command.principal, now=timezone.now(), claim=claimed.bytes)
                raise KeyQuotaExceeded(headers={"Retry-After": str(usage.retry_after)})
            return claimed
        record = _find(command)
        if record is None:
            continue  # purged after our claim saw it, or expired and forgotten
        return record
    raise IdempotencyKeyInProgress(headers={"Retry-After": policy.in_progress_retry_after()})


def _claim(cursor: CursorWrapper, command: Command) -> _Claim | None:
    """INSERT the key unless it exists: the new row if this transaction now holds it.

    ``INSERT … ON CONFLICT DO NOTHING RETURNING id``: the unique index
    arbitrates. If another transaction holds the key
    uncommitted, the INSERT waits for it, at most ``IDEMPOTENCY_WAIT``: if
    it commits, ours inserts nothing (and the caller reads its answer); if
    it rolls back, ours inserts. A key that exists costs no write and no
    lock, and a conflict raises nothing, so the transaction goes on with no
    savepoint.

    On PostgreSQL the same query first bounds this transaction's waits
    (:func:`_claim_sql`), so they hold for the claim's own wait, and it
    carries the transaction's ``BEGIN`` (:func:`_send`): one round trip
    instead of three. The row it returns also tells what the principal's
    keys hold (idempotency/quota.py), read by the same statement.
    """
    now = timezone.now()
    expires_at = now + policy.key_ttl()
    db = cursor.db
    principal = command.principal
    field_digests = command.fingerprint.field_digests
    values = _bound(
        db,
        _FIELDS,
        {
            "tenant": principal.tenant_id,
            "principal": principal.pk,
            "key": command.key,
            "request_method": command.method,
            "request_path": command.path,
            "fingerprint": command.fingerprint.digest,
            "field_digests": field_digests,
            "created_at": now,
            "expires_at": expires_at,
        },
    ) + _bound(db, _USAGE_FILTER, {"principal": principal.pk, "expires_by": now})
    sql = _claim_sql(db.vendor, *_wait_bounds(db.vendor))
    try:
        row = _send(cursor, sql, values)
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
            raise IdempotencyKeyInProgress(
                headers={"Retry-After": policy.in_progress_retry_after()}
            ) from None
        raise
    if row is None:
        return None
    return _Claim(
        id=int(row[0]),
        principal_id=principal.pk,
        expires_at=expires_at,
        bytes=quota.claim_bytes(
            key=command.key,
            method=command.method,
            path=command.path,
            field_digests=field_digests,
        ),
        used=int(row[1]),
    )


def _store(cursor: CursorWrapper, claim: _Claim, answer: _Answer, *, commits: bool) -> None:
    """Insert the answer beside our claim, and add the key's bytes to its principal's total.

    An INSERT rather than an UPDATE of the claim's row: a narrow row of its
    own costs PostgreSQL less than a second version of the key's whole row
    (docs/SCALING.md), and leaves no dead row behind. The total's upsert
    comes last: it locks its row (idempotency/quota.py), and the lock lasts
    from there to the ``COMMIT``.

    ``commits``: the store is the last statement of the outermost
    transaction, and sends its ``COMMIT`` (:func:`_send`).
    """
    db = cursor.db
    answer_values = _bound(
        db,
        _ANSWER_FIELDS,
        {"key": claim.id, "status": answer.status, "body": answer.body, "headers": answer.headers},
    )
    usage_values = _bound(
        db,
        _USAGE_FIELDS,
        {
            "principal": claim.principal_id,
            "expires_by": quota.bucket_end(claim.expires_at),
            "shard": quota.shard(db),
            "bytes": claim.bytes + quota.answer_bytes(answer.body, answer.headers),
        },
    )
    store_answer, add_usage = _store_sql(db.vendor), _usage_sql(db.vendor)
    if db.vendor == "postgresql":
        # One query, two statements (and the COMMIT): one round trip.
        _send(cursor, f"{store_answer}; {add_usage}", answer_values + usage_values, commits=commits)
    else:
        cursor.execute(store_answer, answer_values)
        _send(cursor, add_usage, usage_values, commits=commits)


def _send(
    cursor: CursorWrapper, sql: str, values: list[Any], *, commits: bool = False
) -> tuple[Any, ...] | None:
    """Execute one of the guard's statements, with its transaction's BEGIN or COMMIT.

    Outside autocommit, psycopg sends ``BEGIN`` before the first statement
    of a transaction, and ``atomic()`` sends ``COMMIT`` at the end of its
    outermost block: a round trip each, besides the statements'. The claim
    is the first statement of a command's transaction and the store its
    last, so on PostgreSQL they send ``BEGIN; INSERT …`` and
    ``INSERT …; COMMIT``, each one query and one round trip: the guard adds
    two statements to a first execution and no round trip of its own
    (measured in docs/SCALING.md). Where a condition below does not hold,
    the statement is sent alone and psycopg and Django do as usual.

    - ``BEGIN`` goes with the statement when psycopg would send it next
      (the transaction has not begun, at the default isolation level).
      psycopg is then told to send statements as they come (autocommit):
      inside the open transaction block that is all it would do, and
      ``atomic()`` sets autocommit back on at the block's end anyway. The
      block's ``COMMIT`` or ``ROLLBACK`` still ends the transaction.
    - ``COMMIT`` goes with the store when the guard's block is the
      outermost: nothing runs between the store and the block's end, so
      ``atomic()`` then finds the transaction over and psycopg sends
      nothing more. A ``COMMIT`` that fails (a serialization failure, a
      deferred constraint) raises here, inside the block, and nothing is
      stored. A transaction that a command marked for rollback never sends
      it: Django refuses any statement in such a transaction.
    """
    db = cursor.db
    postgresql = db.vendor == "postgresql"
    if postgresql and _begin_is_pending(db.connection):
        db.connection.autocommit = True
        sql = f"BEGIN; {sql}"
    if postgresql and commits:
        sql = f"{sql}; COMMIT"
    cursor.execute(sql, values)
    # psycopg has received every result of the query, or raised, by now: its
    # own cursor steps through them, without Django's error translation
    # wrapped around each call.
    results = cursor.cursor
    if postgresql:
        # To the last result: the claim's row, past BEGIN and the wait bounds.
        while results.nextset():
            pass
    return results.fetchone() if results.description is not None else None


def _begin_is_pending(raw: psycopg.Connection[Any]) -> bool:
    """Whether psycopg would send a plain ``BEGIN``, a round trip of its own, before ours."""
    return (
        not raw.autocommit
        and raw.pgconn.transaction_status == pq.TransactionStatus.IDLE
        and raw.isolation_level is None
        and raw.read_only is None
        and raw.deferrable is None
    )


# The hot path's two statements are plain SQL, built once per backend (and
# per set of wait bounds) from the models' own names, not the ORM's
# ``create()``, which would build a model instance and compile the same
# statement anew for every command. Only names from the models and the
# server's own settings are formatted in; every value a request carries is
# bound. Each mapping lists its model's columns in the order the statement
# names them.
_FIELDS = {f.name: f for f in IdempotencyKey._meta.concrete_fields if not f.primary_key}
_ANSWER_FIELDS = {f.name: f for f in StoredAnswer._meta.concrete_fields}
_USAGE_FIELDS = {f.name: f for f in StorageUsage._meta.concrete_fields if not f.primary_key}
# The claim's look at the total: the principal's buckets not ended by now.
_USAGE_FILTER = {name: _USAGE_FIELDS[name] for name in ("principal", "expires_by")}


def _bound(db: BaseDatabaseWrapper, fields: Mapping[str, Field], row: dict[str, Any]) -> list[Any]:
    """The values of ``row`` (field name → value) as the backend takes them, in ``fields``' order.

    psycopg adapts integers, strings, bytes and aware datetimes as they
    are, and a JSON value travels as its text, cast to ``jsonb`` in the
    SQL: a field's own conversion would cost a dozen microseconds per
    command for the same bytes. Other backends (SQLite) get each value as
    its model field prepares it.
    """
    if db.vendor == "postgresql":
        return [
            json.dumps(row[name]) if isinstance(field, JSONField) else row[name]
            for name, field in fields.items()
        ]
    return [field.get_db_prep_save(row[name], db) for name, field in fields.items()]


def _insert_sql(vendor: str, model: type[Model], fields: Mapping[str, Field]) -> str:
    """``INSERT INTO <model's table> (<fields>) VALUES (<a placeholder each>)``."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields.values())
    placeholders = ", ".join(
        "%s::jsonb" if vendor == "postgresql" and isinstance(f, JSONField) else "%s"
        for f in fields.values()
    )
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({placeholders})"  # noqa: S608


def _unique_fields() -> list[str]:
    """(principal, tenant, key): the claim's unique constraint, which arbitrates."""
    (unique,) = IdempotencyKey._meta.constraints
    assert isinstance(unique, UniqueConstraint)  # noqa: S101 - a model change must revisit this
    return list(unique.fields)


@functools.cache
def _claim_sql(vendor: str, *wait_bounds: str) -> str:
    quote = connection.ops.quote_name
    arbiter = ", ".join(quote(_FIELDS[name].column) for name in _unique_fields())
    # On PostgreSQL the wait bounds are set in the same query, before the
    # row is inserted, so they bound the claim's own wait.
    bounds = _WAIT_BOUNDS % wait_bounds if vendor == "postgresql" else ""
    usage = quote(StorageUsage._meta.db_table)
    principal, expires_by, used = (
        quote(_USAGE_FIELDS[name].column) for name in ("principal", "expires_by", "bytes")
    )
    return (
        f"{bounds}{_insert_sql(vendor, IdempotencyKey, _FIELDS)}"  # noqa: S608
        f" ON CONFLICT ({arbiter}) DO NOTHING"
        f" RETURNING {quote(IdempotencyKey._meta.pk.column)},"
        f" (SELECT COALESCE(SUM({used}), 0) FROM {usage}"
        f" WHERE {principal} = %s AND {expires_by} > %s)"
    )


@functools.cache
def _store_sql(vendor: str) -> str:
    return _insert_sql(vendor, StoredAnswer, _ANSWER_FIELDS)


@functools.cache
def _usage_sql(vendor: str) -> str:
    """Add to the bucket's row, or make it: ``INSERT … ON CONFLICT DO UPDATE``."""
    quote = connection.ops.quote_name
    (unique,) = StorageUsage._meta.constraints
    assert isinstance(unique, UniqueConstraint)  # noqa: S101 - a model change must revisit this
    arbiter = ", ".join(quote(_USAGE_FIELDS[name].column) for name in unique.fields)
    used = quote(_USAGE_FIELDS["bytes"].column)
    return (
        f"{_insert_sql(vendor, StorageUsage, _USAGE_FIELDS)}"
        f" ON CONFLICT ({arbiter}) DO UPDATE"
        f" SET {used} = {quote(StorageUsage._meta.db_table)}.{used} + EXCLUDED.{used}"
    )


# Bounds on how long this transaction waits for locks and may hold them.
# ``lock_timeout`` turns a wait for another request's claim into an error
# after ``IDEMPOTENCY_WAIT``; ``statement_timeout`` and
# ``idle_in_transaction_session_timeout`` make PostgreSQL end a command that
# hangs with its claim for longer than ``IDEMPOTENCY_LOCK_TIMEOUT``. All
# three are transaction-local (``SET LOCAL``): they end with the
# transaction, and hold behind a transaction-pooling PgBouncer. SQLite has
# no equivalents: there the connection's busy timeout bounds the wait for
# its one writer. The values are the server's own settings, in whole
# milliseconds, written into the query (one per set of values, cached)
# rather than bound: three parameters fewer to adapt on every claim. They
# are statements of their own in the claim's query: an INSERT fed by a
# subquery that called ``set_config()`` cost PostgreSQL 0.1 ms more a
# claim than these and a plain ``INSERT … VALUES`` (docs/SCALING.md).
_WAIT_BOUNDS = (
    "SET LOCAL lock_timeout = '%s';"
    " SET LOCAL statement_timeout = '%s';"
    " SET LOCAL idle_in_transaction_session_timeout = '%s'; "
)


def _wait_bounds(vendor: str) -> tuple[str, ...]:
    """The values of ``_WAIT_BOUNDS``, read from the settings at each claim."""
    if vendor != "postgresql":
        return ()
    return (
        _milliseconds(policy.wait_seconds()),
        _milliseconds(policy.lock_timeout_seconds()),
        _milliseconds(policy.lock_timeout_seconds()),
    )


def _find(command: Command) -> IdempotencyKey | None:
    """The key's answered record, unless it has expired: what a retry needs, and no more.

    Read before the claim so that a replay costs one indexed read, with no
    transaction, no claim and no field digests; a first execution pays a
    read that finds nothing (docs/SCALING.md). An expired key is forgotten
    here, and claimed anew by the caller.
    """
    record = _lookup(command)
    if record is not None and record.is_expired:
        _forget(record)
        return None
    return record


# What a replay reads: the key's row without its field digests (up to
# 12 KiB, loaded only for a conflict, which names the fields that differ),
# and its answer.
_KEY = Selected.of(
    IdempotencyKey,
    "k",
    *(f.name for f in IdempotencyKey._meta.concrete_fields if f.name != "field_digests"),
)
_ANSWER = Selected.of(StoredAnswer, "a")


def _lookup(command: Command) -> IdempotencyKey | None:
    """The key's committed record, with its answer: one indexed read, no lock.

    ``IdempotencyKey.objects.select_related("answer").filter(principal=…,
    tenant_id=…, key=…, answer__isnull=False).defer("field_digests").first()``
    as plain SQL (api/plain_reads.py): every replay runs it. The inner join
    to the answer says that every committed key has its answer (one
    transaction writes both) rather than trusting it.
    """
    db = connections[DEFAULT_DB_ALIAS]
    principal = command.principal
    scope: dict[str, int | str] = {
        "principal": principal.pk,
        "tenant": principal.tenant_id,
        "key": command.key,
    }
    with db.cursor() as cursor:
        cursor.execute(_lookup_sql(db.vendor), [scope[name] for name in _unique_fields()])
        row = cursor.fetchone()
    if row is None:
        return None
    key_values, answer_values = split(row, _KEY, _ANSWER)
    record = _KEY.instance(db, key_values)
    record.answer = _ANSWER.instance(db, answer_values)
    return record


@functools.cache
def _lookup_sql(vendor: str) -> str:
    db = connections[DEFAULT_DB_ALIAS]
    # Principal first: the claim's unique index leads with it.
    where = " AND ".join(f"{_KEY.column(db, name)} = %s" for name in _unique_fields())
    return (
        f"SELECT {_KEY.columns(db)}, {_ANSWER.columns(db)} FROM {_KEY.table(db)}"  # noqa: S608
        f" JOIN {_ANSWER.table(db)} ON {_ANSWER.column(db, 'key')} = {_KEY.column(db, 'id')}"
        f" WHERE {where}"
    )


def _forget(record: IdempotencyKey) -> None:
    # Conditional on expiry, so a key claimed anew meanwhile is kept; its
    # answer goes with it (CASCADE).
    IdempotencyKey.objects.filter(pk=record.pk, expires_at__lte=timezone.now()).delete()


def _replay(command: Command, record: IdempotencyKey, on_replay: ReplayHook | None) -> HttpResponse:
    if record.fingerprint != command.fingerprint.digest:
        raise _conflict(command, record)
    return _response_from(record, on_replay)


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


def _response_from(record: IdempotencyKey, on_replay: ReplayHook | None) -> HttpResponse:
    stored = record.answer
    response = _Answer(
        status=stored.status, body=bytes(stored.body), headers=stored.headers
    ).response()
    response[REPLAYED_HEADER] = "true"
    if on_replay is not None:
        response = on_replay(record, response)
    return response


def _milliseconds(seconds: float) -> str:
    return f"{int(seconds * 1000)}ms"
