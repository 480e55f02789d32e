"""A batch of rows passed to PostgreSQL as one JSON document (``json_populate_recordset``).

Why: psycopg, with Django's default client-side binding, converts a statement's
placeholders in Python, and a statement of hundreds of rows is too long for its
cache of conversions: the django.tasks worker's upsert of a batch of finished
records (hundreds of rows of 19 columns) spent much of its loop thread there (the
docs' performance page has the profile). One ``json.dumps`` in C and the server's
JSON parser do the same work at a fraction of the cost, and the statement's text
never changes. Column names come from the models; every value is in the
one parameter.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

#: The field types whose values go into JSON as they are (after the datetime rule).
_PLAIN = (models.CharField, models.TextField, models.IntegerField, models.BooleanField,
          models.JSONField, models.DateTimeField, models.BigIntegerField,
          models.SmallIntegerField, models.PositiveIntegerField,
          models.PositiveSmallIntegerField)
_statements: dict[tuple[str, str], str] = {}


def applies(conn: BaseDatabaseWrapper, meta: Any) -> bool:
    """On PostgreSQL, for a model whose every column is of a type :func:`upsert` writes."""
    return conn.vendor == "postgresql" and all(
        isinstance(f, _PLAIN) for f in meta.concrete_fields)


def upsert(conn: BaseDatabaseWrapper, objs: Sequence[models.Model], tail: str) -> None:
    """INSERT ``objs`` (one model, primary keys set) as one JSON parameter; ``tail`` is
    the statement's ON CONFLICT clause (vendor_sql.upsert_clause)."""
    meta = objs[0]._meta
    fields = meta.concrete_fields
    sql = _statement(conn, meta, tail)
    values = [(f.column, f.attname, _converter(f)) for f in fields]
    rows = [{column: convert(obj.__dict__[name]) for column, name, convert in values}
            for obj in objs]
    with conn.cursor() as cursor:
        cursor.execute(sql, [json.dumps(rows, separators=(",", ":"))])


def _converter(field: models.Field) -> Callable[[Any], Any]:
    if isinstance(field, models.DateTimeField):
        return _datetime
    return _same


def _same(value: Any) -> Any:
    return value


def _datetime(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _statement(conn: BaseDatabaseWrapper, meta: Any, tail: str) -> str:
    key = (meta.label, tail)
    if key not in _statements:
        quote = conn.ops.quote_name
        columns = ", ".join(quote(f.column) for f in meta.concrete_fields)
        table = quote(meta.db_table)
        _statements[key] = (f"INSERT INTO {table} ({columns}) SELECT {columns} "
                            f"FROM json_populate_recordset(NULL::{table}, %s) {tail}")
    return _statements[key]
