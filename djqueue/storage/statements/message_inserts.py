"""The hot path's inserts and upserts (send, task records) without the ORM's
per-call SQL compilation and per-row object churn; the claim and ack statements
are in djqueue.storage.statements.claim_statements.

``Model.save()``, ``bulk_create`` and a queryset compile their SQL on every
call and pass each value through several layers; on the hot path that cost
more than the statements themselves (the claim-and-ack loop spent more time in
Python than in MariaDB). Here each statement is built once per connection
vendor (and row count) from the model's fields, and values are prepared by the
fields' own ``get_db_prep_save`` (djqueue.storage.statements.prepared_values). Everything else (conditions,
SQLite's claims, the admin) uses the ORM.

Ids come back with ``RETURNING`` where the database has it (MariaDB >= 10.5,
PostgreSQL, SQLite), else (and for a single row on MySQL and SQLite) from
``lastrowid`` (for many rows on MySQL, see vendor_sql.ids_of_multi_row_insert).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar, cast

from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.options import Options

from djqueue.models import Message
from djqueue.storage import dialects, fastpath
from djqueue.storage.statements import json_rows, model_columns, prepared_values, vendor_sql

M = TypeVar("M", bound=models.Model)

_COLUMNS = Message._meta.concrete_fields
_ATTNAMES = tuple(f.attname for f in _COLUMNS)
_FIELDS = [f for f in _COLUMNS if not f.primary_key]
_PK = Message._meta.pk.attname
#: Rows per INSERT statement (SQLite allows 32,766 parameters; this uses 15 a row).
CHUNK = 1000
_statements: dict[tuple[str, int, bool], str] = {}


def insert_messages(db: str, messages: list[Message],
                    conn: BaseDatabaseWrapper | None = None) -> None:
    """INSERT ``messages`` (a statement per CHUNK rows) and set their primary keys.
    Call inside a transaction when there may be more than CHUNK of them. ``conn``:
    ``db``'s connection, where the caller has it."""
    conn = conn or connections[db]
    if len(messages) == 1:
        _insert_one(db, conn, messages[0])
        return
    returning = bool(conn.features.can_return_rows_from_bulk_insert)
    escape = dialects.escapes_client_side(conn)
    for start in range(0, len(messages), CHUNK):
        chunk = messages[start:start + CHUNK]
        if escape is not None:
            sql, params = _insert_shared_inline(conn, chunk, returning, escape)
        else:
            sql, params = _insert_sql(conn, len(chunk), returning), _params(chunk, conn)
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            if returning:
                ids = [row[0] for row in cursor.fetchall()]
            else:  # MySQL has no RETURNING (Django's bulk_create leaves the ids unset)
                ids = vendor_sql.ids_of_multi_row_insert(conn, cursor.lastrowid, len(chunk))
        for message, pk in zip(chunk, ids, strict=True):
            fastpath.mark_saved(message, pk, db)


def _insert_one(db: str, conn: BaseDatabaseWrapper, message: Message) -> None:
    """One row. On MySQL/MariaDB and SQLite the id comes with the OK packet
    (lastrowid), where RETURNING would cost a result set; on MySQL/MariaDB every
    value is escaped into the text by the driver, so no parameter pass follows. On
    PostgreSQL the values are bound by the server (fastpath.insert_returning_id),
    and on SQLite the statement goes to the driver itself (fastpath.insert_lastrowid)."""
    if conn.vendor == "postgresql":
        pk = fastpath.insert_returning_id(conn, _insert_sql(conn, 1, True),
                                          _params([message], conn))
        fastpath.mark_saved(message, pk, db)
        return
    if dialects.writes_values_into_sql(conn.vendor):
        text = _one_row_templates.render(conn, message) or prepared_values.render(
            conn, message, _INSERT_ATTNAMES, _message_preparers(conn),
            cast("Callable[[object], str]", dialects.literal_client_side(conn)))  # (the driver's)
        pk = fastpath.insert_written_out(conn, _insert_sql(conn, 0, False) + text)
        fastpath.mark_saved(message, pk, db)
        return
    if conn.vendor == "sqlite":
        pk = fastpath.insert_lastrowid(conn, _insert_sql(conn, 1, False), _params([message], conn))
        fastpath.mark_saved(message, pk, db)
        return
    with conn.cursor() as cursor:
        cursor.execute(_insert_sql(conn, 1, False), _params([message], conn))
        fastpath.mark_saved(message, cursor.lastrowid, db)


def _params(messages: list[Message], conn: BaseDatabaseWrapper) -> list:
    """Every field of every message, prepared as the ORM would. A value that is the very
    object the first message holds (a batch shares its options) is prepared once."""
    prepare = _message_preparers(conn)
    first = [getattr(messages[0], name) for name in _INSERT_ATTNAMES]
    first_prepared = [p(value) for p, value in zip(prepare, first, strict=True)]
    params = list(first_prepared)
    for message in messages[1:]:
        values = message.__dict__
        for p, name, shared, prepared in zip(prepare, _INSERT_ATTNAMES, first, first_prepared,
                                             strict=True):
            value = values[name]
            params.append(prepared if value is shared else p(value))
    return params


def _insert_shared_inline(conn: BaseDatabaseWrapper, messages: list[Message],
                          returning: bool, escape: Callable[[object], str]) -> tuple[str, list]:
    """A multi-row INSERT whose values shared by every row (the batch's options) are
    escaped once, by the driver, into the statement; the rest stay parameters."""
    prepare = _message_preparers(conn)
    first = [getattr(messages[0], name) for name in _INSERT_ATTNAMES]
    varying = set()
    for message in messages[1:]:
        values = message.__dict__
        for index, name in enumerate(_INSERT_ATTNAMES):
            if values[name] is not first[index]:
                varying.add(index)
    columns = [(index, name, prepare[index]) for index, name in enumerate(_INSERT_ATTNAMES)
               if index in varying]
    row = "(" + ", ".join(
        "%s" if index in varying else escape(p(value))
        for index, (p, value) in enumerate(zip(prepare, first, strict=True))) + ")"
    params = [p(message.__dict__[name]) for message in messages for _, name, p in columns]
    return _insert_sql(conn, 0, returning) + ", ".join([row] * len(messages)) + (
        _returning(conn) if returning else ""), params


_INSERT_ATTNAMES = [field.attname for field in _FIELDS]
#: What differs from one plain send to the next; a send's other values repeat.
_SEND_VARYING = ("visible_at", "body", "group_key", "sent_at")
_one_row_templates = prepared_values.RowTemplates("message", _FIELDS, _SEND_VARYING)


def _message_preparers(conn: BaseDatabaseWrapper) -> list[Callable]:
    return prepared_values.preparers(conn, "message", _FIELDS)


def upsert(db: str, objs: Sequence[models.Model], update_fields: Sequence[str],
           rendered: Sequence[str] | None = None) -> None:
    """INSERT ``objs`` of one model (primary keys set) in one statement; where a row with
    the same key exists, update its ``update_fields`` instead (see vendor_sql.upsert_clause).
    ``rendered``: the rows as :func:`render_row` made them, in the order of ``objs``."""
    if not objs:
        return
    conn = connections[db]
    meta = type(objs[0])._meta
    head, tail = _upsert_sql(conn, meta, tuple(update_fields))
    if rendered is None and json_rows.applies(conn, meta):
        json_rows.upsert(conn, objs, tail)
        return
    if rendered is not None:
        with conn.cursor() as cursor:
            cursor.execute(head + ", ".join(rendered) + tail)
        return
    fields = meta.concrete_fields
    prepare = prepared_values.preparers(conn, meta.label, fields)
    rows = [[p(obj.__dict__[f.attname]) for f, p in zip(fields, prepare, strict=True)]
            for obj in objs]
    escape = dialects.escapes_client_side(conn) if len(rows) > 1 else None
    if escape is None:
        row = "(" + ", ".join(["%s"] * len(fields)) + ")"
        sql, params = head + ", ".join([row] * len(rows)) + tail, [v for r in rows for v in r]
    else:  # the values every row shares (a batch's status, times, backend) escaped once
        first = rows[0]
        shared = [all(type(r[i]) is type(v) and r[i] == v for r in rows)
                  for i, v in enumerate(first)]
        row = "(" + ", ".join(escape(v) if same else "%s"
                              for v, same in zip(first, shared, strict=True)) + ")"
        sql = head + ", ".join([row] * len(rows)) + tail
        params = [v for r in rows for v, same in zip(r, shared, strict=True) if not same]
    with conn.cursor() as cursor:
        cursor.execute(sql, params)


def render_row(db: str, obj: models.Model,
               templates: prepared_values.RowTemplates | None = None) -> str | None:
    """``obj``'s row for :func:`upsert`'s ``rendered``, every value escaped into the text by
    the driver (MySQL/MariaDB); None where values travel as parameters. ``templates``:
    rows of ``obj``'s model that share most of their values (see RowTemplates).

    Why: a thread that has the row early (a handler thread, as its task ends) can
    do the escaping there, and the transaction that writes a batch of rows only
    joins their texts.
    """
    conn = connections[db]
    literal = dialects.literal_client_side(conn)
    if literal is None:
        return None
    if templates is not None and (text := templates.render(conn, obj)) is not None:
        return text
    fields = obj._meta.concrete_fields
    return prepared_values.render(conn, obj, [f.attname for f in fields],
                             prepared_values.preparers(conn, obj._meta.label, fields), literal)


def _upsert_sql(conn: BaseDatabaseWrapper, meta: Options, update_fields: tuple[str, ...],
                ) -> tuple[str, str]:
    """The text of an upsert before its rows, and after them."""
    key = (dialects.sql_dialect(conn), meta.label, update_fields)
    if key in _upserts:
        return _upserts[key]
    quote = conn.ops.quote_name
    columns = model_columns.columns(meta.model)
    head = (f"INSERT INTO {quote(meta.db_table)} "
            f"({', '.join(quote(columns[f.attname]) for f in meta.concrete_fields)}) VALUES ")
    tail = " " + vendor_sql.upsert_clause(conn, model_columns.column_of(meta.pk),
                                      [columns[name] for name in update_fields])
    _upserts[key] = head, tail
    return head, tail


_upserts: dict[tuple[str, str, tuple[str, ...]], tuple[str, str]] = {}


def _insert_sql(conn: BaseDatabaseWrapper, rows: int, returning: bool) -> str:
    """The INSERT for ``rows`` rows of parameters; with 0, the text up to VALUES."""
    key = (dialects.sql_dialect(conn), rows, returning)
    if key not in _statements:
        quote = conn.ops.quote_name
        row = "(" + ", ".join(["%s"] * len(_FIELDS)) + ")"
        sql = (f"INSERT INTO {quote(Message._meta.db_table)} "
               f"({', '.join(quote(model_columns.column_of(f)) for f in _FIELDS)}) VALUES ")
        if rows:
            sql += ", ".join([row] * rows) + (_returning(conn) if returning else "")
        _statements[key] = sql
    return _statements[key]


def _returning(conn: BaseDatabaseWrapper) -> str:
    return f" RETURNING {conn.ops.quote_name('id')}"


def build(model: type[M], **values: object) -> M:
    """An unsaved instance, as ``model(**values)`` makes it (see fastpath.builder)."""
    return fastpath.builder(model)(**values)
