"""Inserting messages on the send path without the ORM's per-call SQL compilation.

``Model.save()`` and ``bulk_create`` compile an INSERT for every call and
prepare each value through several layers; on the send path that cost more
than the insert itself. Here the statement for a given row count is built once
per connection vendor from the model's fields, and each value goes through its
field's own ``get_db_prep_save``, as the ORM would do. Ids come back with
``RETURNING`` where the database has it (MariaDB >= 10.5, PostgreSQL, SQLite),
else (and for a single row on MySQL and SQLite) from ``lastrowid``.
"""

from __future__ import annotations

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.models import Message

_FIELDS = [f for f in Message._meta.concrete_fields if not f.primary_key]
#: Rows per INSERT statement (SQLite allows 32,766 parameters; this uses 15 a row).
CHUNK = 1000
_statements: dict[tuple[str, int, bool], str] = {}


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
        params = _params(chunk, conn)
        with conn.cursor() as cursor:
            cursor.execute(_insert_sql(conn, len(chunk), returning), params)
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
    names = [field.attname for field in _FIELDS]
    first = [getattr(messages[0], name) for name in names]
    first_prepared = [field.get_db_prep_save(value, conn)
                      for field, value in zip(_FIELDS, first, strict=True)]
    params = list(first_prepared)
    for message in messages[1:]:
        for field, name, shared, prepared in zip(_FIELDS, names, first, first_prepared,
                                                 strict=True):
            value = getattr(message, name)
            params.append(prepared if value is shared else field.get_db_prep_save(value, conn))
    return params


def _insert_sql(conn: BaseDatabaseWrapper, rows: int, returning: bool) -> str:
    key = (conn.vendor, rows, returning)
    if key not in _statements:
        quote = conn.ops.quote_name
        row = "(" + ", ".join(["%s"] * len(_FIELDS)) + ")"
        sql = (f"INSERT INTO {quote(Message._meta.db_table)} "
               f"({', '.join(quote(f.column) for f in _FIELDS)}) VALUES "
               + ", ".join([row] * rows))
        _statements[key] = sql + f" RETURNING {quote('id')}" if returning else sql
    return _statements[key]
