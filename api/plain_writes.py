"""The rows a command inserts, as plain SQL written once per model: a speed trick.

``Model.objects.create()`` and ``bulk_create()`` compile their INSERT anew
each time they run, through the query compiler, the model's signals and
the per-field machinery of ``save()``: for the three inserts of a first
execution of ``POST /v1/orders`` (its order, its lines, its event) a
large share of the command's Python (docs/SCALING.md, "Where a create's
Python went"). :class:`PlainInsert` writes each model's statement once per
backend and number of rows, from the model's own table and column names,
and binds each field's value as ``save()`` would: through the field's
``pre_save`` (defaults, ``auto_now``) and ``get_db_prep_save``. A column
the database computes (an event's transaction id) is given as a Django
expression, compiled once. The instances come out as ``create()`` leaves
them: saved, with a primary key the database generated read back.

What it skips is what these models do not use: ``save()`` overrides and
the ``pre_save``/``post_save`` signals (tests/api/test_plain_writes.py
fails if one of the models it serves gains either). To remove the trick,
call ``objects.create()`` or ``objects.bulk_create()`` where
:meth:`PlainInsert.insert` is called.
"""

import functools
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import AutoField, Expression, Field, Model
from django.db.models.sql import InsertQuery

M = TypeVar("M", bound=Model)
# A column's value computed by the database, as an expression for a backend.
Computed = Callable[[BaseDatabaseWrapper], Expression]


class PlainInsert(Generic[M]):
    """``INSERT INTO <model's table> … VALUES (…), (…)`` of instances of one model."""

    def __init__(self, model: type[M], *, computed: Mapping[str, Computed] | None = None) -> None:
        self.model = model
        self.computed = dict(computed or {})
        meta = model._meta
        pk = meta.pk
        # A primary key the database generates is left to it, and read back.
        self.generated_pk = pk if isinstance(pk, AutoField) else None
        self.fields: tuple[Field[Any, Any], ...] = tuple(
            f
            for f in meta.concrete_fields
            if f is not self.generated_pk and f.name not in self.computed
        )

    def insert(self, *instances: M) -> None:
        """Insert ``instances`` in one statement, as ``bulk_create`` would.

        :raises IntegrityError: as ``create()`` would, for the same rows.
        """
        if not instances:
            return
        db = connections[DEFAULT_DB_ALIAS]
        sql, computed_params = self._sql(db, len(instances))
        values: list[Any] = []
        for instance in instances:
            values += [f.get_db_prep_save(f.pre_save(instance, True), db) for f in self.fields]
            values += computed_params
        with db.cursor() as cursor:
            cursor.execute(sql, values)
            if self.generated_pk is not None:
                keys = self._generated_keys(db, cursor, len(instances))
                for instance, key in zip(instances, keys, strict=True):
                    setattr(instance, self.generated_pk.attname, key)
        for instance in instances:
            # Saved, as create() leaves it (Django's documented model state).
            instance._state.adding = False  # noqa: SLF001
            instance._state.db = db.alias  # noqa: SLF001

    def _generated_keys(self, db: BaseDatabaseWrapper, cursor: Any, rows: int) -> list[Any]:
        if db.features.can_return_rows_from_bulk_insert:
            return [row[0] for row in cursor.fetchall()]
        # SQLite before RETURNING: one row at a time, as bulk_create does.
        assert rows == 1, "one row at a time without RETURNING"  # noqa: S101
        table, column = self.model._meta.db_table, self.generated_pk.column  # type: ignore[union-attr]
        return [db.ops.last_insert_id(cursor, table, column)]

    def _sql(self, db: BaseDatabaseWrapper, rows: int) -> tuple[str, list[Any]]:
        return _insert_sql(self, db.alias, db.vendor, rows)


# One statement per model and number of rows: the callers' row counts are
# bounded (an order's lines by MAX_ITEMS, an event's operations by the
# tenant's endpoints), so these are few.
@functools.cache
def _insert_sql(
    insert: PlainInsert[Any], alias: str, vendor: str, rows: int
) -> tuple[str, list[Any]]:
    """The statement, and the computed columns' parameters of one row. Cached per backend."""
    db = connections[alias]
    quote = db.ops.quote_name
    model = insert.model
    query = InsertQuery(model)
    compiler = query.get_compiler(connection=db)
    computed_sql, computed_params = [], []
    for make in insert.computed.values():
        resolved = make(db).resolve_expression(query, allow_joins=False, for_save=True)
        sql, params = compiler.compile(resolved)
        computed_sql.append(sql)
        computed_params += params
    names = [f.column for f in insert.fields] + [
        model._meta.get_field(name).column for name in insert.computed
    ]
    row = "(" + ", ".join(["%s"] * len(insert.fields) + computed_sql) + ")"
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)}"  # noqa: S608 - names from the model only
        f" ({', '.join(quote(name) for name in names)}) VALUES {', '.join([row] * rows)}"
    )
    if insert.generated_pk is not None and db.features.can_return_rows_from_bulk_insert:
        sql += f" RETURNING {quote(insert.generated_pk.column)}"
    return sql, computed_params
