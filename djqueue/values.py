"""Values prepared and escaped for the hot path's statements (see djqueue.rows).

Each field's value goes through the function the ORM would apply
(``get_db_prep_save``), skipped where it returns the value unchanged; on
MySQL/MariaDB a whole row can be escaped into SQL text by the driver's own
``literal()``, the function mysqlclient applies to parameters.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

from django.conf import settings
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper


def render(conn: BaseDatabaseWrapper, obj: models.Model, attnames: Sequence[str],
           prepare: Sequence[Callable], literal: Callable[[object], str]) -> str:
    """``(v1, v2, ...)``: ``obj``'s values escaped by ``literal`` (the driver's, see
    vendor.literal_client_side). The small values rows repeat (ids, flags, names, None,
    empty or one-string JSON lists) are escaped once per connection, model and field."""
    values = obj.__dict__
    where = (id(conn), obj._meta.label)
    cached = _escaped.get(where)
    if cached is None or cached[0] is not conn or len(cached[1]) > 10_000:
        cached = _escaped[where] = (conn, {})
    known = cached[1]
    parts = []
    for p, name in zip(prepare, attnames, strict=True):
        value = values[name]
        kind = type(value)
        if value is None or kind is int or (kind is str and len(value) < 64):
            key: tuple = (name, kind, value)
        elif (kind is list or kind is dict) and not value:
            key = (name, kind)
        elif kind is list and len(value) == 1 and type(value[0]) is str and len(value[0]) < 64:
            key = (name, kind, value[0])
        else:
            parts.append(literal(p(value)))
            continue
        text = known.get(key)
        if text is None:
            text = known[key] = literal(p(value))
        parts.append(text)
    return "(" + ", ".join(parts) + ")"


_escaped: dict[tuple[int, str], tuple[BaseDatabaseWrapper, dict[tuple, str]]] = {}

_preparer_cache: dict[tuple[int, str], tuple[BaseDatabaseWrapper, list[Callable]]] = {}


def preparers(conn: BaseDatabaseWrapper, label: str,
              fields: Sequence[models.Field]) -> list[Callable]:
    """One function a field: ``get_db_prep_save``, skipped for the values it returns
    unchanged (None, and ints and strings for integer and text fields)."""
    cached = _preparer_cache.get((id(conn), label))
    if cached is not None and cached[0] is conn:
        return cached[1]
    functions = []
    for field in fields:
        target = field.target_field if field.is_relation else field
        if isinstance(target, models.DateTimeField):
            # get_prep_value only warns about naive datetimes, and these are aware.
            functions.append(_datetime_preparer(conn))
            continue
        plain = (int if isinstance(target, models.IntegerField) else
                 str if isinstance(target, (models.CharField, models.TextField)) else None)
        functions.append(_passing(plain, field, conn))
    _preparer_cache[(id(conn), label)] = (conn, functions)
    return functions


def _datetime_preparer(conn: BaseDatabaseWrapper) -> Callable:
    adapt = conn.ops.adapt_datetimefield_value
    if conn.vendor in ("mysql", "sqlite") and settings.USE_TZ and conn.timezone is dt.UTC:
        # What their adapt_datetimefield_value makes of a UTC datetime (timezone.now()),
        # without its per-call settings and timezone lookups.
        def prepare(value: dt.datetime | None) -> object:
            if value is None:
                return None
            if value.tzinfo is dt.UTC:
                return str(value.replace(tzinfo=None))
            return adapt(value)
        return prepare
    return lambda value: None if value is None else adapt(value)


def _passing(plain: type | None, field: models.Field, conn: BaseDatabaseWrapper) -> Callable:
    prepare = field.get_db_prep_save
    if plain is None:
        return lambda value: prepare(value, conn)
    return lambda value: value if value is None or type(value) is plain else prepare(value, conn)


def id_list(ids: Sequence[object]) -> str:
    """``1, 2, 3``: primary keys as SQL integer literals, for ``IN (...)`` lists.

    Why not parameters: the driver escaped each id with its ``literal()`` (a
    claim+ack batch of 100 passed 300 of them) and the text came out the same.
    ``int()`` admits nothing but an integer (it raises on anything else)."""
    return ", ".join([str(int(pk)) for pk in ids])
