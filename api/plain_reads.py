"""The reads every request makes, as plain SQL written once: a speed trick.

The ORM compiles a queryset anew each time it runs: for a look-up by a
unique key with a join or two, more Python than PostgreSQL takes to
answer it. Most requests
make such a look-up or two (the bearer token; a replay's stored answer),
so the few that run on every request are written here once per set of
columns, from the models' own table and column names, and their rows
become model instances as the ORM would make them: with the backend's
and each field's converters, through ``Model.from_db``, the columns not
selected deferred. The rest of the code cannot tell the difference.

What it bought, the token's read and a replay's look-up measured in one
process: docs/SCALING.md, *Retries and reads*. To remove the trick, run
the ORM queryset each caller names beside its SQL.
"""

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model
from django.db.models.expressions import Col

M = TypeVar("M", bound=Model)
Converter = Callable[[Any, Any, BaseDatabaseWrapper], Any]
ColumnConverters = tuple[tuple[Col, tuple[Converter, ...]], ...]


@dataclass(frozen=True)
class Selected(Generic[M]):
    """Some columns of one model, under an alias, as a SELECT names them and reads them back."""

    model: type[M]
    alias: str
    fields: tuple["Field[Any, Any]", ...]

    @classmethod
    def of(cls, model: type[M], alias: str, *names: str) -> "Selected[M]":
        """``names`` of ``model``'s fields (all its concrete fields when none are named)."""
        meta = model._meta
        fields = (
            tuple(meta.get_field(name) for name in names) if names else tuple(meta.concrete_fields)
        )
        return cls(model=model, alias=alias, fields=fields)  # type: ignore[arg-type]

    @property
    def width(self) -> int:
        return len(self.fields)

    def table(self, db: BaseDatabaseWrapper) -> str:
        """``"table" alias``, for a FROM or JOIN clause."""
        return f"{db.ops.quote_name(self.model._meta.db_table)} {self.alias}"

    def column(self, db: BaseDatabaseWrapper, name: str) -> str:
        """``alias."column"`` of the field ``name``, for a WHERE or ON clause."""
        field = self.model._meta.get_field(name)
        assert isinstance(field, Field)  # noqa: S101 - a column, not a relation's other end
        return f"{self.alias}.{db.ops.quote_name(field.column)}"

    def columns(self, db: BaseDatabaseWrapper) -> str:
        """The select list of these columns, in their order."""
        return ", ".join(f"{self.alias}.{db.ops.quote_name(f.column)}" for f in self.fields)

    def where(self, *, lock: bool = False, **conditions: Any) -> list[M]:
        """The instances of the rows whose fields equal ``conditions``, one of them for a list.

        ``Model.objects.filter(a=1, b__in=[2, 3]).only(<these fields>)`` as
        one plain SELECT, written once per set of names and list lengths;
        with ``lock``, ``select_for_update()``'s (where the backend has it).
        """
        db = connections[DEFAULT_DB_ALIAS]
        shape = tuple(
            (name, len(value) if isinstance(value, list | tuple) else None)
            for name, value in conditions.items()
        )
        values: list[Any] = []
        if any(length == 0 for _, length in shape):
            return []  # nothing is IN an empty list
        for value in conditions.values():
            values += value if isinstance(value, list | tuple) else [value]
        with db.cursor() as cursor:
            cursor.execute(_where_sql(self, db.alias, shape, lock), values)
            rows = cursor.fetchall()
        return [self.instance(db, row) for row in rows]

    def instance(self, db: BaseDatabaseWrapper, values: Sequence[Any]) -> M:
        """The model instance of a row's values for these columns, as the ORM makes it."""
        converted = [
            _convert(value, converters, column, db)
            for value, (column, converters) in zip(values, _converters(self, db.alias), strict=True)
        ]
        return self.model.from_db(db.alias, [f.attname for f in self.fields], converted)


# One statement per set of names and list lengths: a list's length is
# bounded by its caller (an order's SKUs by MAX_ITEMS), so these are few.
@functools.cache
def _where_sql(
    selected: Selected[Any], alias: str, shape: tuple[tuple[str, int | None], ...], lock: bool
) -> str:
    db = connections[alias]
    tests = [
        f"{selected.column(db, name)} = %s"
        if length is None
        else f"{selected.column(db, name)} IN ({', '.join(['%s'] * length)})"
        for name, length in shape
    ]
    return (
        f"SELECT {selected.columns(db)} FROM {selected.table(db)}"  # noqa: S608 - names from the model only
        f" WHERE {' AND '.join(tests) or 'TRUE'}"
        + (" FOR UPDATE" if lock and db.features.has_select_for_update else "")
    )


def _convert(value: Any, converters: tuple[Converter, ...], column: Col, db: Any) -> Any:
    for converter in converters:
        value = converter(value, column, db)
    return value


# Per database alias: every connection of an alias has the same backend, and
# converters take the connection they convert for as an argument.
@functools.cache
def _converters(selected: Selected[Any], alias: str) -> ColumnConverters:
    db = connections[alias]
    result = []
    for field in selected.fields:
        column = field.get_col(selected.alias)
        converters = (*db.ops.get_db_converters(column), *column.get_db_converters(db))
        result.append((column, tuple(converters)))
    return tuple(result)


def split(values: Sequence[Any], *parts: Selected[Any]) -> list[Sequence[Any]]:
    """A row of ``parts``' columns one after the other, cut into each part's values."""
    cut, start = [], 0
    for part in parts:
        cut.append(values[start : start + part.width])
        start += part.width
    return cut
