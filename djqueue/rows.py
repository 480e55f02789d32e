"""The hot path's inserts and upserts (send, task records) without the ORM's
per-call SQL compilation and per-row object churn; the claim and ack statements
are in djqueue.claim_rows.

``Model.save()``, ``bulk_create`` and a queryset compile their SQL on every
call and pass each value through several layers; on the hot path that cost
more than the statements themselves (the claim-and-ack loop spent more time in
Python than in MariaDB). Here each statement is built once per connection
vendor (and row count) from the model's fields, and values are prepared by the
fields' own ``get_db_prep_save`` (djqueue.values). Everything else (conditions,
SQLite's claims, the admin) uses the ORM.

Ids come back with ``RETURNING`` where the database has it (MariaDB >= 10.5,
PostgreSQL, SQLite), else (and for a single row on MySQL and SQLite) from
``lastrowid``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TypeVar

from django.db import IntegrityError, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.base import ModelState
from django.db.models.options import Options
from django.db.models.signals import post_init, pre_init
from django.utils.asyncio import async_unsafe

from djqueue import values as row_values
from djqueue import vendor
from djqueue.models import Message

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
    if len(messages) == 1 and conn.vendor != "postgresql":
        _insert_one(db, conn, messages[0])
        return
    returning = bool(conn.features.can_return_rows_from_bulk_insert)
    if not returning:
        # MySQL has no RETURNING: Django's bulk_create cannot tell the ids either.
        Message.objects.using(db).bulk_create(messages, batch_size=CHUNK)
        return
    escape = vendor.escapes_client_side(conn)
    for start in range(0, len(messages), CHUNK):
        chunk = messages[start:start + CHUNK]
        if escape is not None:
            sql, params = _insert_shared_inline(conn, chunk, returning, escape)
        else:
            sql, params = _insert_sql(conn, len(chunk), returning), _params(chunk, conn)
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            ids = [row[0] for row in cursor.fetchall()]
        for message, pk in zip(chunk, ids, strict=True):
            _saved(message, pk, db)


def _insert_one(db: str, conn: BaseDatabaseWrapper, message: Message) -> None:
    """One row on MySQL/MariaDB or SQLite: the id comes with the OK packet
    (lastrowid), where RETURNING would cost a result set. On MySQL/MariaDB every
    value is escaped into the text by the driver, so no parameter pass follows."""
    if conn.vendor == "mysql":
        text = _one_row_templates.render(conn, message) or row_values.render(
            conn, message, _INSERT_ATTNAMES, _message_preparers(conn),
            vendor.literal_client_side(conn))
        _saved(message, _insert_written_out(conn, _insert_sql(conn, 0, False) + text), db)
        return
    with conn.cursor() as cursor:
        cursor.execute(_insert_sql(conn, 1, False), _params([message], conn))
        _saved(message, cursor.lastrowid, db)


@async_unsafe
def _insert_written_out(conn: BaseDatabaseWrapper, sql: str) -> int:
    """Run a one-row INSERT whose values are escaped into ``sql`` (MySQL/MariaDB) and
    return the new row's id.

    Why not ``connection.cursor()``: a plain send is one such statement, and the
    cursor layers around it (Django's wrapper and execute hooks, the backend's
    wrapper, the driver's cursor and its result bookkeeping) cost about 12 of a
    send's 53 µs of CPU, which on this kind of machine also delays the server's
    answer. When nothing observes queries (no ``execute_wrapper``, no query
    logging) the statement goes straight to the driver's connection, after the
    checks ``cursor()`` makes and with the same error translation.
    """
    if conn.execute_wrappers or conn.queries_logged:
        with conn.cursor() as cursor:
            cursor.execute(sql)
            return cursor.lastrowid
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    conn.validate_thread_sharing()
    conn.validate_no_broken_transaction()
    driver = conn.connection
    with conn.wrap_database_errors:
        try:
            driver.query(sql.encode(driver.encoding))
        except conn.Database.OperationalError as exc:
            # As the MySQL backend's cursor does: these codes are integrity errors.
            from django.db.backends.mysql.base import CursorWrapper

            if exc.args[0] in CursorWrapper.codes_for_integrityerror:
                raise IntegrityError(*exc.args) from exc
            raise
        return driver.insert_id()


def _saved(message: Message, pk: int, db: str) -> None:
    message.__dict__[_PK] = pk
    state = message._state
    state.adding, state.db = False, db


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
_one_row_templates = row_values.RowTemplates("message", _FIELDS, _SEND_VARYING)


def _message_preparers(conn: BaseDatabaseWrapper) -> list[Callable]:
    return row_values.preparers(conn, "message", _FIELDS)


def upsert(db: str, objs: Sequence[models.Model], update_fields: Sequence[str],
           rendered: Sequence[str] | None = None) -> None:
    """INSERT ``objs`` of one model (primary keys set) in one statement; where a row with
    the same key exists, update its ``update_fields`` instead (see vendor.upsert_clause).
    ``rendered``: the rows as :func:`render_row` made them, in the order of ``objs``."""
    if not objs:
        return
    conn = connections[db]
    meta = type(objs[0])._meta
    head, tail = _upsert_sql(conn, meta, tuple(update_fields))
    if rendered is not None:
        with conn.cursor() as cursor:
            cursor.execute(head + ", ".join(rendered) + tail)
        return
    fields = meta.concrete_fields
    prepare = row_values.preparers(conn, meta.label, fields)
    rows = [[p(obj.__dict__[f.attname]) for f, p in zip(fields, prepare, strict=True)]
            for obj in objs]
    escape = vendor.escapes_client_side(conn) if len(rows) > 1 else None
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
               templates: row_values.RowTemplates | None = None) -> str | None:
    """``obj``'s row for :func:`upsert`'s ``rendered``, every value escaped into the text by
    the driver (MySQL/MariaDB); None where values travel as parameters. ``templates``:
    rows of ``obj``'s model that share most of their values (see RowTemplates).

    Why: a thread that has the row early (a handler thread, as its task ends) can
    do the escaping there, and the transaction that writes a batch of rows only
    joins their texts.
    """
    conn = connections[db]
    literal = vendor.literal_client_side(conn)
    if literal is None:
        return None
    if templates is not None and (text := templates.render(conn, obj)) is not None:
        return text
    fields = obj._meta.concrete_fields
    return row_values.render(conn, obj, [f.attname for f in fields],
                             row_values.preparers(conn, obj._meta.label, fields), literal)


def _upsert_sql(conn: BaseDatabaseWrapper, meta: Options, update_fields: tuple[str, ...],
                ) -> tuple[str, str]:
    """The text of an upsert before its rows, and after them."""
    key = (conn.vendor, meta.label, update_fields)
    if key in _upserts:
        return _upserts[key]
    quote = conn.ops.quote_name
    head = (f"INSERT INTO {quote(meta.db_table)} "
            f"({', '.join(quote(f.column) for f in meta.concrete_fields)}) VALUES ")
    tail = " " + vendor.upsert_clause(conn, meta.pk.column,
                                      [meta.get_field(n).column for n in update_fields])
    _upserts[key] = head, tail
    return head, tail


_upserts: dict[tuple[str, str, tuple[str, ...]], tuple[str, str]] = {}


def _insert_sql(conn: BaseDatabaseWrapper, rows: int, returning: bool) -> str:
    """The INSERT for ``rows`` rows of parameters; with 0, the text up to VALUES."""
    key = (conn.vendor, rows, returning)
    if key not in _statements:
        quote = conn.ops.quote_name
        row = "(" + ", ".join(["%s"] * len(_FIELDS)) + ")"
        sql = (f"INSERT INTO {quote(Message._meta.db_table)} "
               f"({', '.join(quote(f.column) for f in _FIELDS)}) VALUES ")
        if rows:
            sql += ", ".join([row] * rows) + (_returning(conn) if returning else "")
        _statements[key] = sql
    return _statements[key]


def _returning(conn: BaseDatabaseWrapper) -> str:
    return f" RETURNING {conn.ops.quote_name('id')}"


def build(model: type[M], **values: object) -> M:
    """An unsaved instance, as ``model(**values)`` makes it, without ``Model.__init__``'s
    per-field work (unless pre/post_init receivers exist)."""
    return builder(model)(**values)


def builder(model: type[M], **shared: object) -> Callable[..., M]:
    """``build`` for many instances that all have the ``shared`` values: the receivers
    are looked up, and the shared values merged with the defaults, once."""
    if (pre_init.receivers or post_init.receivers) and (
            pre_init.has_listeners(model) or post_init.has_listeners(model)):
        return functools.partial(model, **shared) if shared else model
    if not shared:
        return _builder(model)
    static, called = _defaults(model)
    return _make(model, {**static, **shared}, [(n, f) for n, f in called if n not in shared])


@functools.cache
def _builder(model: type[M]) -> Callable[..., M]:
    static, called = _defaults(model)
    return _make(model, static, called)


def _make(model: type[M], base: dict[str, object],
          called: list[tuple[str, models.Field]]) -> Callable[..., M]:
    new = model.__new__

    def make(**values: object) -> M:
        instance = new(model)
        fields = instance.__dict__
        fields.update(base)
        for name, field in called:
            if name not in values:
                fields[name] = field.get_default()
        fields.update(values)
        instance._state = ModelState()
        return instance

    return make


@functools.cache
def _defaults(model: type[models.Model]) -> tuple[dict[str, object], list[tuple[str, models.Field]]]:
    """A model's constant defaults, and the fields whose default is called each time
    (callables, and mutable values such as a JSONField's ``default=list``)."""
    static, called = {}, []
    for field in model._meta.concrete_fields:
        if field.has_default() and (callable(field.default) or isinstance(
                field.default, (list, dict, set))):
            called.append((field.attname, field))
        else:
            static[field.attname] = field.get_default()
    return static, called


