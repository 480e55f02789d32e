"""Model instances from rows read by a hand-written statement, as the ORM makes them.

A statement of djqueue's own returns the driver's values; the ORM would pass each
through the backend's and the field's converters (a MySQL boolean's 0 or 1, a JSON
column's text, SQLite's datetime text) and build the instance with ``from_db``.
Here the same converters are looked up once per connection and column list, and
the instance is made by fastpath.from_rows. Used by the claim (message rows) and
by the reads a send repeats (djqueue.storage.statements.lookup_statements).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.dispatch import receiver

from djqueue.storage import fastpath

M = TypeVar("M", bound=models.Model)
Converter = Callable[[Any, Any, BaseDatabaseWrapper], Any]
#: Per connection: (model, columns, datetimes as text) -> each column's converters.
_kept: weakref.WeakKeyDictionary[BaseDatabaseWrapper, dict[tuple, list]] = (
    weakref.WeakKeyDictionary())


def instances(model: type[M], db: str, attnames: tuple[str, ...], rows: Sequence[Sequence],
              datetimes_as_text: bool = False) -> list[M]:
    """Instances of ``model`` from ``rows`` holding the columns of ``attnames`` in that
    order, as ``from_db`` makes them. ``datetimes_as_text``: the datetime columns came
    as ISO text (djqueue.storage.dialects.reads_datetimes_as_text)."""
    if not rows:
        return []
    return fastpath.from_rows(model, db, attnames,
                              values(model, db, attnames, rows, datetimes_as_text))


def values(model: type[models.Model], db: str, attnames: tuple[str, ...],
           rows: Sequence[Sequence], datetimes_as_text: bool = False) -> list[list]:
    """The values of ``rows`` (the columns of ``attnames``) as the model's fields read
    them, without instances."""
    conn = connections[db]
    converters = _converters(model, conn, attnames, datetimes_as_text)
    converted = []
    for row in rows:
        found = list(row)
        for index, functions, col in converters:
            value = found[index]
            for function in functions:
                value = function(value, col, conn)
            found[index] = value
        converted.append(found)
    return converted


def _converters(model: type[models.Model], conn: BaseDatabaseWrapper,
                attnames: tuple[str, ...], datetimes_as_text: bool,
                ) -> list[tuple[int, list[Converter], Any]]:
    """The converters of each column that has any, looked up once per connection (the
    backend's are methods of that connection's own operations, and a connection serves
    one thread). Why kept: looking them up again was a share of a quiet process's
    queue read, on the path of its send (docs/performance.md)."""
    kept = _kept.get(conn)
    if kept is None:
        kept = _kept[conn] = {}
    key = (model, attnames, datetimes_as_text)
    found = kept.get(key)
    if found is not None:
        return found
    found = []
    table = model._meta.db_table
    fields = {f.attname: f for f in model._meta.concrete_fields}
    for index, name in enumerate(attnames):
        field = fields[name]
        col = field.get_col(table)
        if datetimes_as_text and isinstance(field, models.DateTimeField):
            functions: list[Converter] = [_datetime_from_text]
        else:
            functions = conn.ops.get_db_converters(col) + col.get_db_converters(conn)
        if functions:
            found.append((index, functions, col))
    kept[key] = found
    return found


@receiver(setting_changed)
def _forget_converters(*, setting: str, **kwargs: Any) -> None:
    """A backend picks its datetime converters by USE_TZ and the time zone."""
    if setting in ("USE_TZ", "TIME_ZONE", "DATABASES"):
        _kept.clear()


def _datetime_from_text(value: str | None, _col: object,
                        conn: BaseDatabaseWrapper) -> datetime | None:
    """What the driver's and the ORM's converters make of a DATETIME, from its text."""
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=conn.timezone) if settings.USE_TZ else parsed
