"""The message statements of the hot path (send, claim, ack) without the ORM's
per-call SQL compilation and per-row object churn.

``Model.save()``, ``bulk_create`` and a queryset compile their SQL on every
call and pass each value through several layers; on the hot path that cost
more than the statements themselves (the claim-and-ack loop spent more time in
Python than in MariaDB). Here each statement is built once per connection
vendor (and row count) from the model's fields; values are prepared by the
fields' own ``get_db_prep_save`` (djqueue.values) and rows are converted by the
same converters the ORM would apply. Everything else (conditions, SQLite's
claims, the admin) uses the ORM.

Ids come back with ``RETURNING`` where the database has it (MariaDB >= 10.5,
PostgreSQL, SQLite), else (and for a single row on MySQL and SQLite) from
``lastrowid``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar

from django.conf import settings
from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.base import ModelState
from django.db.models.options import Options
from django.db.models.signals import post_init, pre_init

from djqueue import values as row_values
from djqueue import vendor
from djqueue.models import Message, State

M = TypeVar("M", bound=models.Model)

_COLUMNS = Message._meta.concrete_fields
_ATTNAMES = tuple(f.attname for f in _COLUMNS)
_FIELDS = [f for f in _COLUMNS if not f.primary_key]
_DATETIMES = frozenset(f.attname for f in _COLUMNS if isinstance(f, models.DateTimeField))
#: Rows per INSERT statement (SQLite allows 32,766 parameters; this uses 15 a row).
CHUNK = 1000
_statements: dict[tuple[str, int, bool], str] = {}
_built: dict[tuple[str, str], str] = {}


def insert_messages(db: str, messages: list[Message]) -> None:
    """INSERT ``messages`` (a statement per CHUNK rows) and set their primary keys.
    Call inside a transaction when there may be more than CHUNK of them."""
    conn = connections[db]
    # One row on MySQL/SQLite: the id comes with the OK packet (lastrowid); RETURNING
    # would cost a result set. PostgreSQL has no lastrowid.
    returning = bool(conn.features.can_return_rows_from_bulk_insert) and (
        len(messages) > 1 or conn.vendor == "postgresql")
    if len(messages) > 1 and not returning:
        # MySQL has no RETURNING: Django's bulk_create cannot tell the ids either.
        Message.objects.using(db).bulk_create(messages, batch_size=CHUNK)
        return
    for start in range(0, len(messages), CHUNK):
        chunk = messages[start:start + CHUNK]
        escape = vendor.escapes_client_side(conn)
        if escape is not None and len(chunk) == 1:
            sql, params = _insert_one_inline(conn, chunk[0]), None
        elif escape is not None:
            sql, params = _insert_shared_inline(conn, chunk, returning, escape)
        else:
            sql, params = _insert_sql(conn, len(chunk), returning), _params(chunk, conn)
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            if returning:
                ids = [row[0] for row in cursor.fetchall()]
            else:
                ids = [conn.ops.last_insert_id(cursor, Message._meta.db_table, "id")]
        for message, pk in zip(chunk, ids, strict=True):
            message.pk = pk
            message._state.adding = False
            message._state.db = db


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


def _insert_one_inline(conn: BaseDatabaseWrapper, message: Message) -> str:
    """A one-row INSERT (MySQL) with every value escaped by the driver into the text,
    so no parameter pass follows."""
    return _insert_sql(conn, 0, False) + row_values.render(
        conn, message, _INSERT_ATTNAMES, _message_preparers(conn),
        vendor.literal_client_side(conn))


_INSERT_ATTNAMES = [field.attname for field in _FIELDS]


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


def render_row(db: str, obj: models.Model) -> str | None:
    """``obj``'s row for :func:`upsert`'s ``rendered``, every value escaped into the text by
    the driver (MySQL/MariaDB); None where values travel as parameters.

    Why: a thread that has the row early (a handler thread, as its task ends) can
    do the escaping there, and the transaction that writes a batch of rows only
    joins their texts.
    """
    conn = connections[db]
    literal = vendor.literal_client_side(conn)
    if literal is None:
        return None
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


def lock_ready(db: str, queue_id: int, limit: int) -> list[Message]:
    """``SELECT ... FOR UPDATE SKIP LOCKED`` the next ``limit`` ready messages of a
    queue, in claim order (see djqueue.claims)."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(_sql(conn, "lock_ready", _lock_ready_sql),
                       [queue_id, int(State.READY), limit])
        return load_messages(db, cursor.fetchall(), vendor.reads_datetimes_as_text(conn))


def lock_ready_after(db: str, queue_id: int, priority: int, after_id: int,
                     limit: int) -> list[Message]:
    """``lock_ready`` continued after message ``after_id`` of priority ``priority``: the
    rest of that priority level only (see djqueue.claim_cursor)."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(_sql(conn, "lock_ready_after", _lock_ready_after_sql),
                       [queue_id, int(State.READY), priority, after_id, limit])
        return load_messages(db, cursor.fetchall(), vendor.reads_datetimes_as_text(conn))


def stamp_claimed(db: str, ids: Sequence[int], *, owner: str, token: str,
                  lease_end: datetime, now: datetime) -> None:
    """Mark the locked messages ``ids`` claimed by ``owner`` under lease ``token``."""
    conn = connections[db]
    adapt = conn.ops.adapt_datetimefield_value
    with conn.cursor() as cursor:
        cursor.execute(_in_ids(_sql(conn, "stamp_claimed", _stamp_claimed_sql), ids),
                       [int(State.CLAIMED), owner, token, adapt(lease_end), adapt(now)])


def lock_leases(db: str, ids: Sequence[int]) -> list[tuple[int, int, str]]:
    """Lock the messages ``ids`` that still exist; their (id, state, lease token).

    Why by primary key alone: with ``state`` in the WHERE clause MySQL may scan
    the (state, visible_at) index and lock other receivers' rows."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(_in_ids(_sql(conn, "lock_leases", _lock_leases_sql), ids))
        return cursor.fetchall()


def delete(db: str, ids: Sequence[int]) -> int:
    """Delete the messages ``ids`` (no model refers to a message: nothing cascades)."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(_in_ids(_sql(conn, "delete", _delete_sql), ids))
        return cursor.rowcount


def load_messages(db: str, rows: Sequence[Sequence],
                  datetimes_as_text: bool = False) -> list[Message]:
    """Message instances from rows of every column in field order, as ``from_db`` makes
    them. Without pre/post_init receivers, the instances' dicts are filled directly
    (what ``Model.__init__`` ends up doing, at a fraction of its cost).
    ``datetimes_as_text``: the datetime columns came as ISO text (vendor.reads_datetimes_as_text)."""
    if not rows:
        return []
    conn = connections[db]
    converters = []
    for index, field in enumerate(_COLUMNS):
        col = field.get_col(Message._meta.db_table)
        if datetimes_as_text and field.attname in _DATETIMES:
            functions = [_datetime_from_text]
        else:
            functions = conn.ops.get_db_converters(col) + col.get_db_converters(conn)
        if functions:
            converters.append((index, functions, col))
    plain = not (pre_init.has_listeners(Message) or post_init.has_listeners(Message))
    messages = []
    for row in rows:
        values = list(row)
        for index, functions, col in converters:
            value = values[index]
            for function in functions:
                value = function(value, col, conn)
            values[index] = value
        if not plain:
            messages.append(Message.from_db(db, _ATTNAMES, values))
            continue
        message = Message.__new__(Message)
        message.__dict__.update(zip(_ATTNAMES, values, strict=True))
        state = message._state = ModelState()
        state.adding, state.db = False, db
        messages.append(message)
    return messages


def _datetime_from_text(value: str | None, _col: object,
                        conn: BaseDatabaseWrapper) -> datetime | None:
    """What the driver's and the ORM's converters make of a DATETIME, from its text."""
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=conn.timezone) if settings.USE_TZ else parsed


def build(model: type[M], **values: object) -> M:
    """An unsaved instance, as ``model(**values)`` makes it, without ``Model.__init__``'s
    per-field work (unless pre/post_init receivers exist)."""
    return builder(model)(**values)


def builder(model: type[M]) -> Callable[..., M]:
    """``build`` for many instances: the receivers are looked up once, not per instance."""
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        return model
    static, called = _defaults(model)
    new = model.__new__

    def make(**values: object) -> M:
        instance = new(model)
        fields = instance.__dict__
        fields.update(static)
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


def _sql(conn: BaseDatabaseWrapper, name: str,
         build: Callable[[BaseDatabaseWrapper], str]) -> str:
    key = (conn.vendor, name)
    if key not in _built:
        _built[key] = build(conn)
    return _built[key]


def _names(conn: BaseDatabaseWrapper) -> tuple[str, dict[str, str]]:
    quote = conn.ops.quote_name
    return quote(Message._meta.db_table), {f.attname: quote(f.column) for f in _COLUMNS}


def _in_ids(template: str, ids: Sequence[int]) -> str:
    """``template`` with its ``{ids}`` list filled in (see values.id_list)."""
    return template.replace("{ids}", row_values.id_list(ids), 1)


def _claim_select(conn: BaseDatabaseWrapper) -> str:
    """``SELECT`` every column ``FROM`` the table, datetimes as text where the vendor
    reads them so (see load_messages)."""
    table, c = _names(conn)
    if vendor.reads_datetimes_as_text(conn):
        c = {name: f"CAST({column} AS CHAR)" if name in _DATETIMES else column
             for name, column in c.items()}
    return (f"SELECT {', '.join(c[name] for name in _ATTNAMES)} "
            f"FROM {table}{vendor.claim_index_hint(conn)} ")


def _lock_ready_sql(conn: BaseDatabaseWrapper) -> str:
    _, c = _names(conn)
    return (f"{_claim_select(conn)}WHERE {c['queue_id']} = %s AND {c['state']} = %s "
            f"ORDER BY {c['priority']} DESC, {c['id']} ASC LIMIT %s FOR UPDATE SKIP LOCKED")


def _lock_ready_after_sql(conn: BaseDatabaseWrapper) -> str:
    _, c = _names(conn)
    return (f"{_claim_select(conn)}WHERE {c['queue_id']} = %s AND {c['state']} = %s AND {c['priority']} = %s "
            f"AND {c['id']} > %s ORDER BY {c['id']} ASC LIMIT %s FOR UPDATE SKIP LOCKED")


def _stamp_claimed_sql(conn: BaseDatabaseWrapper) -> str:
    table, c = _names(conn)
    return (f"UPDATE {table} SET {c['attempts']} = {c['attempts']} + 1, {c['state']} = %s, "
            f"{c['owner']} = %s, {c['lease_token']} = %s, {c['visible_at']} = %s, "
            f"{c['claimed_at']} = %s WHERE {c['id']} IN ({{ids}})")


def _lock_leases_sql(conn: BaseDatabaseWrapper) -> str:
    table, c = _names(conn)
    # SQLite has no FOR UPDATE (the ORM drops it there too): its writers are serialised.
    lock = " FOR UPDATE" if conn.features.has_select_for_update else ""
    return (f"SELECT {c['id']}, {c['state']}, {c['lease_token']} FROM {table} "
            f"WHERE {c['id']} IN ({{ids}}){lock}")


def _delete_sql(conn: BaseDatabaseWrapper) -> str:
    table, c = _names(conn)
    return f"DELETE FROM {table} WHERE {c['id']} IN ({{ids}})"
