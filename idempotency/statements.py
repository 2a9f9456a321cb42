"""The protocol's three statements as they go over the wire, and what each trick in them bought.

The protocol (idempotency/commands.py) says what the protocol does; this
module says how it reaches the database, through three calls:

- :func:`find`: a key's answered record with its answer, one indexed read;
- :func:`claim`: insert a key's row unless the key exists, and read what
  the principal's keys hold, as the command's transaction's first statement;
- :func:`store`: insert the answer beside the claim and add the key's
  bytes to the principal's total, as its last.

Each statement names its model's concrete fields and binds the values of
the instance it is given, so a column added to a model is written with no
edit here (tests/idempotency/test_statements.py pins it).

The claim's ``ON CONFLICT DO NOTHING … RETURNING`` and the total's
``ON CONFLICT DO UPDATE`` are SQL whatever else is done: the ORM has no
insert that skips a taken key, nor an upsert that adds. Everything else
below is a speed trick, not a guarantee, and each comes out without
touching the protocol. What each bought is measured in docs/SCALING.md,
"What the protocol's cost is made of" (and "Retries and reads" for the
look-up): the figures live there, with the runs they come from.

1. Plain SQL written once per backend from the models' names
   (:func:`_claim_sql`, :func:`_answer_sql`, :func:`_usage_sql`,
   :func:`_lookup_sql`), rows read back by api/plain_reads.py: the ORM
   compiles its query anew for every command. To remove it from
   :func:`find`, run the queryset its docstring names; from the store,
   insert the answer with ``answer.save(force_insert=True)``.
2. Plain values bound (:func:`_bound`): psycopg adapts the values as they
   are, where each field's own conversion costs Python for the same bytes.
   To remove it, take the non-PostgreSQL branch of :func:`_bound` on every
   backend and drop the ``::jsonb`` casts.
3. The transaction's ``BEGIN`` sent with the claim and its ``COMMIT`` with
   the store, psycopg's autocommit switched to let them through
   (:func:`_send`): two round trips fewer. To remove it, have :func:`_send`
   execute the statement alone, as it does off PostgreSQL.
4. The wait bounds as ``SET LOCAL`` statements in the claim's query
   (:data:`_WAIT_BOUNDS`): a query of their own would be a round trip more,
   and an ``INSERT`` fed by ``set_config()`` costs PostgreSQL more than
   these and a plain ``INSERT … VALUES``. Their values are written into the
   cached query (``SET`` takes no parameters, and every value bound is
   Python spent). To remove it, execute them in a query of their own
   before the claim.
5. The store's two statements in one query: one round trip, not two. To
   remove it, take the non-PostgreSQL branch of :func:`store`.
6. One cursor for the claim and the store, its results read through
   psycopg's own cursor (:func:`_send`): each cursor made costs Python, and
   each step through results went through Django's error translation. To
   remove it, open a cursor of ``cursor.db`` in each statement and read
   rows with its ``fetchone()``.
"""

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, JSONField, Model, UniqueConstraint
from psycopg import pq

from accounts.models import Principal
from api.plain_reads import Selected, split
from idempotency import policy
from idempotency.models import IdempotencyKey, StorageUsage, StoredAnswer

# A row of one model, by its fields' attribute names (``principal_id``).
Row = dict[str, Any]
# SQLSTATE of a lock wait cut short by lock_timeout.
_LOCK_NOT_AVAILABLE = "55P03"


class WaitTimedOut(Exception):
    """The claim waited ``IDEMPOTENCY_WAIT`` for another transaction's claim of its key, in vain."""


@dataclass(frozen=True)
class Claimed:
    """A claim that inserted its row."""

    id: int
    # What the principal's keys held before it (idempotency/quota.py).
    used: int


def find(principal: Principal, key: str) -> IdempotencyKey | None:
    """The principal's committed record of ``key``, with its answer: one indexed read, no lock.

    ``IdempotencyKey.objects.select_related("answer").filter(principal=…,
    tenant_id=…, key=…, answer__isnull=False).defer("field_digests").first()``
    as plain SQL (api/plain_reads.py): every replay runs it. The inner join
    to the answer says that every committed key has its answer (one
    transaction writes both) rather than trusting it.
    """
    db = connections[DEFAULT_DB_ALIAS]
    scope: dict[str, int | str] = {
        "principal": principal.pk,
        "tenant": principal.tenant_id,
        "key": key,
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


def claim(cursor: CursorWrapper, key: Row) -> Claimed | None:
    """Insert the key's row unless the key exists; ``None`` if it did.

    ``INSERT … ON CONFLICT DO NOTHING RETURNING id``: the unique index
    arbitrates. If another transaction holds the key uncommitted, the
    INSERT waits for it, at most ``IDEMPOTENCY_WAIT``: if it commits, ours
    inserts nothing; if it rolls back, ours inserts. A key that exists
    costs no write and no lock, and a conflict raises nothing, so the
    transaction goes on with no savepoint. The same statement reads the
    principal's buckets not ended at the row's ``created_at``.

    On PostgreSQL the same query first bounds this transaction's waits
    (:data:`_WAIT_BOUNDS`), so they hold for the claim's own wait, and it
    carries the transaction's ``BEGIN`` (:func:`_send`): one round trip
    instead of three.

    :raises WaitTimedOut: another transaction held the key for longer than
        ``IDEMPOTENCY_WAIT``.
    :raises TypeError: ``key`` is not a row of ``IdempotencyKey`` (:class:`_Columns`).
    """
    db = cursor.db
    values = _KEY_ROW.values(db, key) + _bound(
        db, _USAGE_FILTER, [key["principal_id"], key["created_at"]]
    )
    sql = _claim_sql(db.vendor, *_wait_bounds(db.vendor))
    try:
        row = _send(cursor, sql, values)
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
            raise WaitTimedOut() from None
        raise
    if row is None:
        return None
    return Claimed(id=int(row[0]), used=int(row[1]))


def store(cursor: CursorWrapper, answer: Row, usage: Row, *, ends_transaction: bool) -> None:
    """Insert ``answer`` (a ``StoredAnswer`` row), then add ``usage``'s bytes to its bucket's row.

    ``usage`` is a ``StorageUsage`` row; the upsert makes it if the bucket has none.

    An INSERT rather than an UPDATE of the claim's row: a narrow row of its
    own costs PostgreSQL less CPU than a second version of the key's whole
    row (docs/SCALING.md, "What the protocol's cost is made of"), and
    leaves no dead row behind. The total's upsert comes last: it locks its
    row (idempotency/quota.py), and the lock lasts from there to the
    ``COMMIT``.

    ``ends_transaction``: the store is the last statement of the outermost
    transaction, and may send its ``COMMIT`` (:func:`_send`).

    :raises TypeError: ``answer`` or ``usage`` is not a row of its model (:class:`_Columns`).
    """
    db = cursor.db
    answer_values = _ANSWER_ROW.values(db, answer)
    usage_values = _USAGE_ROW.values(db, usage)
    insert_answer, add_usage = _answer_sql(db.vendor), _usage_sql(db.vendor)
    if db.vendor == "postgresql":
        # One query, two statements (and the COMMIT): one round trip.
        _send(
            cursor,
            f"{insert_answer}; {add_usage}",
            answer_values + usage_values,
            commits=ends_transaction,
        )
    else:
        cursor.execute(insert_answer, answer_values)
        _send(cursor, add_usage, usage_values, commits=ends_transaction)


def _send(
    cursor: CursorWrapper, sql: str, values: list[Any], *, commits: bool = False
) -> tuple[Any, ...] | None:
    """Execute one of the protocol's statements, with its transaction's BEGIN or COMMIT.

    Outside autocommit, psycopg sends ``BEGIN`` before the first statement
    of a transaction, and ``atomic()`` sends ``COMMIT`` at the end of its
    outermost block: a round trip each, besides the statements'. The claim
    is the first statement of a command's transaction and the store its
    last, so on PostgreSQL they send ``BEGIN; INSERT …`` and
    ``INSERT …; COMMIT``, each one query and one round trip: the protocol adds
    two statements to a first execution and no round trip of its own.
    Where a condition below does not hold, the statement is sent alone and
    psycopg and Django do as usual.

    - ``BEGIN`` goes with the statement when psycopg would send it next
      (the transaction has not begun, at the default isolation level).
      psycopg is then told to send statements as they come (autocommit):
      inside the open transaction block that is all it would do, and
      ``atomic()`` sets autocommit back on at the block's end anyway. The
      block's ``COMMIT`` or ``ROLLBACK`` still ends the transaction.
    - ``COMMIT`` goes with the store when the protocol's block is the
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


class _Columns:
    """A statement's columns: its model's concrete fields, in the order it names and binds them.

    Only names from the models and the server's own settings are formatted
    into the SQL; every value a request carries is bound.
    """

    def __init__(self, model: type[Model], *, primary_key: bool) -> None:
        self.model = model
        self.fields = tuple(
            f for f in model._meta.concrete_fields if primary_key or not f.primary_key
        )
        self.names = frozenset(f.attname for f in self.fields)

    def values(self, db: BaseDatabaseWrapper, row: Row) -> list[Any]:
        """``row``'s values in the columns' order, as :func:`_bound` binds them.

        :raises TypeError: a name of ``row`` is not a field's, or a field with
            no default is left out.
        """
        if row.keys() != self.names:
            row = self._completed(row)
        return _bound(db, self.fields, [row[f.attname] for f in self.fields])

    def _completed(self, row: Row) -> Row:
        unknown = sorted(row.keys() - self.names)
        missing = [f.attname for f in self.fields if f.attname not in row and not f.has_default()]
        if unknown or missing:
            name = self.model.__name__
            raise TypeError(f"{name} has no field {unknown}, and needs a value for {missing}")
        return {
            f.attname: row[f.attname] if f.attname in row else f.get_default() for f in self.fields
        }


_KEY_ROW = _Columns(IdempotencyKey, primary_key=False)
# The answer's primary key is its key's id.
_ANSWER_ROW = _Columns(StoredAnswer, primary_key=True)
_USAGE_ROW = _Columns(StorageUsage, primary_key=False)
# The claim's look at the total: the principal's buckets not ended by now.
_USAGE_FILTER = tuple(
    next(f for f in _USAGE_ROW.fields if f.name == name) for name in ("principal", "expires_by")
)


def _bound(
    db: BaseDatabaseWrapper, fields: Sequence["Field[Any, Any]"], values: Sequence[Any]
) -> list[Any]:
    """``values`` of ``fields`` as the backend takes them.

    psycopg adapts integers, strings, bytes and aware datetimes as they
    are, and a JSON value travels as its text, cast to ``jsonb`` in the
    SQL: a field's own conversion would cost Python per value for the same
    bytes. Other backends (SQLite) get each value as
    its model field prepares it.
    """
    if db.vendor == "postgresql":
        return [
            json.dumps(value) if isinstance(field, JSONField) else value
            for field, value in zip(fields, values, strict=True)
        ]
    return [field.get_db_prep_save(value, db) for field, value in zip(fields, values, strict=True)]


def _column(model: type[Model], name: str) -> str:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)  # noqa: S101 - a column, not a relation's other end
    return connection.ops.quote_name(field.column)


def _insert_sql(vendor: str, model: type[Model], fields: Sequence["Field[Any, Any]"]) -> str:
    """``INSERT INTO <model's table> (<fields>) VALUES (<a placeholder each>)``."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    placeholders = ", ".join(
        "%s::jsonb" if vendor == "postgresql" and isinstance(f, JSONField) else "%s" for f in fields
    )
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({placeholders})"  # noqa: S608


def _unique_fields(model: type[Model] = IdempotencyKey) -> list[str]:
    """The fields of ``model``'s one unique constraint: for the key, the claim's arbiter."""
    (unique,) = model._meta.constraints
    assert isinstance(unique, UniqueConstraint)  # noqa: S101 - a model change must revisit this
    return list(unique.fields)


@functools.cache
def _claim_sql(vendor: str, *wait_bounds: str) -> str:
    quote = connection.ops.quote_name
    arbiter = ", ".join(_column(IdempotencyKey, name) for name in _unique_fields())
    # On PostgreSQL the wait bounds are set in the same query, before the
    # row is inserted, so they bound the claim's own wait.
    bounds = _WAIT_BOUNDS % wait_bounds if vendor == "postgresql" else ""
    usage = quote(StorageUsage._meta.db_table)
    principal, expires_by, used = (
        _column(StorageUsage, name) for name in ("principal", "expires_by", "bytes")
    )
    return (
        f"{bounds}{_insert_sql(vendor, IdempotencyKey, _KEY_ROW.fields)}"  # noqa: S608
        f" ON CONFLICT ({arbiter}) DO NOTHING"
        f" RETURNING {quote(IdempotencyKey._meta.pk.column)},"
        f" (SELECT COALESCE(SUM({used}), 0) FROM {usage}"
        f" WHERE {principal} = %s AND {expires_by} > %s)"
    )


@functools.cache
def _answer_sql(vendor: str) -> str:
    return _insert_sql(vendor, StoredAnswer, _ANSWER_ROW.fields)


@functools.cache
def _usage_sql(vendor: str) -> str:
    """Add to the bucket's row, or make it: ``INSERT … ON CONFLICT DO UPDATE``."""
    quote = connection.ops.quote_name
    arbiter = ", ".join(_column(StorageUsage, name) for name in _unique_fields(StorageUsage))
    used = _column(StorageUsage, "bytes")
    return (
        f"{_insert_sql(vendor, StorageUsage, _USAGE_ROW.fields)}"
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
# subquery that called ``set_config()`` costs PostgreSQL more a claim than
# these and a plain ``INSERT … VALUES`` (docs/SCALING.md).
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


def _milliseconds(seconds: float) -> str:
    return f"{int(seconds * 1000)}ms"


# What a replay reads: the key's row without its field digests (up to
# 12 KiB, loaded only for a conflict, which names the fields that differ),
# and its answer.
_KEY = Selected.of(
    IdempotencyKey,
    "k",
    *(f.name for f in IdempotencyKey._meta.concrete_fields if f.name != "field_digests"),
)
_ANSWER = Selected.of(StoredAnswer, "a")


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
