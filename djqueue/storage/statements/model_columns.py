"""The fields and column names of djqueue's models, as a hand-written statement uses them.

Django reads a field's ``column`` as ``str | None`` (None for a field that stores
nothing, a reverse relation or a many-to-many) and ``_meta.get_field`` as a field
or a reverse relation. Each statement here names only concrete fields of its own
models, so these functions return the concrete field and its column as a ``str``;
asked for a field with no column of its own, they raise at once (when the
statement is built, once per process), never write ``None`` into SQL.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import ForeignObjectRel


def field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """``model``'s concrete field ``name`` (a field's name or its attname)."""
    found = model._meta.get_field(name)
    if isinstance(found, ForeignObjectRel) or found.column is None:
        raise LookupError(f"{model._meta.label}.{name} has no column of its own")
    return found


def column_of(concrete: models.Field[Any, Any] | ForeignObjectRel) -> str:
    """The column of a concrete field (of ``_meta.concrete_fields``, say)."""
    column = getattr(concrete, "column", None)
    if not isinstance(column, str):
        raise LookupError(f"{concrete!r} has no column of its own")
    return column


def column(model: type[models.Model], name: str) -> str:
    """The column of ``model``'s concrete field ``name`` (a field's name or its attname)."""
    return column_of(field(model, name))


def columns(model: type[models.Model]) -> dict[str, str]:
    """Every concrete field's column, by its attname and by its name where that differs
    (a foreign key's ``queue`` beside ``queue_id``)."""
    found = {}
    for concrete in model._meta.concrete_fields:
        found[concrete.name] = found[concrete.attname] = column_of(concrete)
    return found


def quoted(conn: BaseDatabaseWrapper, model: type[models.Model], prefix: str = "") -> dict[str, str]:
    """:func:`columns` quoted for ``conn``'s SQL, each after ``prefix`` (a table's
    alias and its dot, ``"m."``, say): the names a hand-written statement writes."""
    quote = conn.ops.quote_name
    return {name: prefix + quote(column) for name, column in columns(model).items()}


def quoted_table(conn: BaseDatabaseWrapper, model: type[models.Model]) -> str:
    """``model``'s table name quoted for ``conn``'s SQL."""
    return conn.ops.quote_name(model._meta.db_table)
