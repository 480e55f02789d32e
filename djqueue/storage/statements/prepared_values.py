"""Values prepared and escaped for the hot path's statements (see djqueue.storage.statements.message_inserts).

Each field's value goes through the function the ORM would apply
(``get_db_prep_save``), skipped where it returns the value unchanged; on
MySQL/MariaDB a whole row can be escaped into SQL text by the driver's own
``literal()``, the function mysqlclient applies to parameters.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from django.conf import settings
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.operations import BaseDatabaseOperations

from djqueue.storage import dialects
from djqueue.storage.dialects import literal_client_side
from djqueue.storage.payloads import dumps


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
    last_time: tuple[object, str] = (None, "")  # a row's times are often one object
    for p, name in zip(prepare, attnames, strict=True):
        value = values[name]
        kind = type(value)
        if value is None or kind is int or kind is bool or (kind is str and len(value) < 64):
            key: tuple = (name, kind, value)
        elif (kind is list or kind is dict) and not value:
            key = (name, kind)
        elif kind is list and len(value) == 1 and type(value[0]) is str and len(value[0]) < 64:
            key = (name, kind, value[0])
        elif kind is dt.datetime and type(p) is _UtcText and value.tzinfo is dt.UTC:
            if value is not last_time[0]:
                last_time = (value, _UtcText.quoted(value))
            parts.append(last_time[1])
            continue
        else:
            parts.append(literal(p(value)))
            continue
        text = known.get(key)
        if text is None:
            text = known[key] = literal(p(value))
        parts.append(text)
    return "(" + ", ".join(parts) + ")"


_escaped: dict[tuple[int, str], tuple[BaseDatabaseWrapper, dict[tuple, str]]] = {}


class RowTemplates:
    """Rows of one model that share all but a few (``varying``) values, as VALUES texts
    for MySQL/MariaDB: the shared values are escaped once into a template per
    connection and combination, so a row costs the escaping of its varying values.

    Why: a plain ``send`` differs from the last one only in its body and times; the
    row's other eleven values went through ``literal()`` (or a cache lookup) on
    every call, and a one-row insert is mostly Python on the client.
    """

    LIMIT = 1000  # templates kept; past that the cache starts again

    def __init__(self, label: str, fields: Sequence[models.Field], varying: Sequence[str]):
        self.label, self.fields = label, list(fields)
        attnames = [f.attname for f in self.fields]
        self.varying = [(attnames.index(name), name) for name in varying]
        self._shared = operator.itemgetter(*[n for n in attnames if n not in varying])
        self._varying = operator.itemgetter(*varying)
        self._templates: dict[tuple, _Template] = {}

    def render(self, conn: BaseDatabaseWrapper, obj: models.Model) -> str | None:
        """``(v1, v2, ...)`` for ``obj``; None when a shared value is not a small
        constant (an int, a short string, either as an enum, or None), which
        :func:`render` handles; None too where values are not written into SQL
        (dialects.writes_values_into_sql)."""
        if not dialects.writes_values_into_sql(conn.vendor):
            return None
        values = obj.__dict__
        key = (id(conn), self._shared(values))
        try:
            found = self._templates.get(key)
        except TypeError:  # an unhashable shared value: a dict or list
            return None
        if found is None or found.driver is not conn.connection or found.conn is not conn:
            found = self._template(conn, values)
            if found is None:
                return None
            if len(self._templates) >= self.LIMIT:
                self._templates.clear()
            self._templates[key] = found
        return found.text.format(*[escape(value) for escape, value
                                   in zip(found.escapes, self._varying(values), strict=True)])

    def _template(self, conn: BaseDatabaseWrapper, values: dict) -> _Template | None:
        if not all(value is None or isinstance(value, int) or (
                isinstance(value, str) and len(value) < 64)
                for value in self._shared(values)):
            return None
        literal = literal_client_side(conn)
        if literal is None:  # the values are parameters: no template
            return None
        prepare = preparers(conn, self.label, self.fields)

        def escaping(p: Callable) -> Callable[[Any], str]:
            def escape(value: object) -> str:
                return "NULL" if value is None else literal(p(value))

            if type(p) is not _UtcText:
                return escape
            last: list[tuple[object, str]] = [(None, "NULL")]

            def escape_datetime(value: dt.datetime | None) -> str:
                # A send's two times are often one object: its text is reused.
                seen, text = last[0]
                if value is seen:
                    return text
                if value is None or value.tzinfo is not dt.UTC:
                    return escape(value)
                text = _UtcText.quoted(value)
                last[0] = (value, text)
                return text

            return escape_datetime

        varying = {index for index, _ in self.varying}
        parts = ["{}" if index in varying else
                 literal(p(values[f.attname])).replace("{", "{{").replace("}", "}}")
                 for index, (f, p) in enumerate(zip(self.fields, prepare, strict=True))]
        return _Template(conn, conn.connection, "(" + ", ".join(parts) + ")",
                         [escaping(prepare[index]) for index, _ in self.varying])


class _Template(NamedTuple):
    conn: BaseDatabaseWrapper
    driver: object  # the driver's connection whose literal() made the texts
    text: str
    escapes: list[Callable[[object], str]]


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
        target = field.target_field if isinstance(field, models.ForeignKey) else field
        if isinstance(target, models.DateTimeField):
            # get_prep_value only warns about naive datetimes, and these are aware.
            functions.append(_datetime_preparer(conn))
            continue
        if (isinstance(target, models.JSONField) and target.encoder is None
                and type(conn.ops).adapt_json_value is BaseDatabaseOperations.adapt_json_value):
            functions.append(_json_preparer(field, conn))
            continue
        plain = (int if isinstance(target, models.IntegerField) else
                 str if isinstance(target, (models.CharField, models.TextField)) else None)
        functions.append(_passing(plain, field, conn))
    _preparer_cache[(id(conn), label)] = (conn, functions)
    return functions


def _datetime_preparer(conn: BaseDatabaseWrapper) -> Callable:
    adapt = conn.ops.adapt_datetimefield_value
    if _utc_as_text(conn):
        return _UtcText(adapt)
    return lambda value: None if value is None else adapt(value)


def plain_text(prepare: Callable) -> bool:
    """Whether ``prepare``, a datetime field's function of :func:`preparers`, makes a
    text that SQL or JSON quotes hold as it is (digits and separators: the naive
    datetime's ``str``) or None."""
    return type(prepare) is _UtcText


class _UtcText:
    """What MySQL's and SQLite's adapt_datetimefield_value make of a UTC datetime
    (timezone.now()): its naive text, without their per-call settings and timezone
    lookups. :func:`render` quotes that text itself (it is digits and separators)."""

    def __init__(self, adapt: Callable) -> None:
        self.adapt = adapt

    @staticmethod
    def quoted(value: dt.datetime) -> str:
        """The SQL literal of a UTC datetime's text: quoted, nothing to escape in it."""
        return f"'{value.replace(tzinfo=None)}'"

    def __call__(self, value: dt.datetime | None) -> object:
        if value is None:
            return None
        if value.tzinfo is dt.UTC:
            return str(value.replace(tzinfo=None))
        return self.adapt(value)


_JSON_NATIVE = frozenset({dict, list, str, int, float, bool})


def _json_preparer(field: models.Field, conn: BaseDatabaseWrapper) -> Callable:
    """JSONField.get_db_prep_save where the backend writes ``json.dumps(value)`` (MySQL,
    SQLite): the same text from a C encoder built once (djqueue.storage.payloads)."""
    prepare = field.get_db_prep_save

    def prepare_json(value: object) -> object:
        if value is None:
            return None
        if type(value) in _JSON_NATIVE:
            with contextlib.suppress(RecursionError):  # a cycle: let Django say so
                return dumps(value)
        return prepare(value, conn)

    return prepare_json


def _utc_as_text(conn: BaseDatabaseWrapper) -> bool:
    """Whether the backend stores an aware UTC datetime as its naive text."""
    return conn.vendor in ("mysql", "sqlite") and settings.USE_TZ and conn.timezone is dt.UTC


def _passing(plain: type | None, field: models.Field, conn: BaseDatabaseWrapper) -> Callable:
    prepare = field.get_db_prep_save
    if plain is None:
        return lambda value: prepare(value, conn)
    return lambda value: value if value is None or type(value) is plain else prepare(value, conn)


def id_list(ids: Sequence[int]) -> str:
    """``1, 2, 3``: primary keys as SQL integer literals, for ``IN (...)`` lists.

    Why not parameters: the driver escaped each id with its ``literal()`` (a
    claim+ack batch of 100 passed 300 of them) and the text came out the same.
    ``int()`` admits nothing but an integer (it raises on anything else)."""
    return ", ".join([str(int(pk)) for pk in ids])
