"""The claim and ack statements on message rows.

See djqueue.storage.claim_engines and djqueue.storage.transitions.

Like djqueue.storage.statements.message_inserts for inserts: each statement is built once per connection
vendor instead of compiled by the ORM per call, id lists are inlined as
integers (values.id_list), and claimed rows become Message instances through
the converters the ORM would apply, without ``Model.__init__``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q

from djqueue.models import Message, State
from djqueue.storage import dialects, fastpath
from djqueue.storage.statements import model_columns, model_rows, prepared_values

_COLUMNS = Message._meta.concrete_fields
_ATTNAMES = tuple(f.attname for f in _COLUMNS)
_DATETIMES = frozenset(f.attname for f in _COLUMNS if isinstance(f, models.DateTimeField))
_built: dict[tuple[str, str], str] = {}


def lock_ready(db: str, queue_id: int, limit: int, where: Q | None = None) -> list[Message]:
    """``SELECT ... FOR UPDATE SKIP LOCKED`` the next ``limit`` ready messages of a
    queue, in claim order (see djqueue.storage.claim_engines). ``where`` narrows the claim
    (conditional receive): that statement is compiled by the ORM per call, the
    plain one is built once."""
    conn = connections[db]
    if where is not None:
        return _lock_ready_where(db, conn, queue_id, limit, where)
    with conn.cursor() as cursor:
        cursor.execute(built_sql(conn, "lock_ready", _lock_ready_sql),
                       [queue_id, int(State.READY), limit])
        return load_messages(db, cursor.fetchall(), dialects.reads_datetimes_as_text(conn))


CONDITIONED_READS = 3


def _lock_ready_where(db: str, conn: BaseDatabaseWrapper, queue_id: int, limit: int,
                      where: Q) -> list[Message]:
    """The conditioned ``lock_ready``. Where a locking read holds rows its condition turns
    down (dialects.locks_rows_before_filtering), the matching ids are read first without
    locks, then locked by id, skipping those another claim took meanwhile; up to
    ``CONDITIONED_READS`` reads fill ``limit`` past rows other claims hold."""
    table = conn.ops.quote_name(Message._meta.db_table)
    query = Message.objects.using(db).filter(queue_id=queue_id, state=State.READY)
    query = query.filter(where).claim_order()
    if not dialects.locks_rows_before_filtering(conn):
        return list(fastpath.with_index_hint(
            query.select_for_update(skip_locked=True)[:limit], table,
            dialects.claim_index_hint(conn)))
    locked: list[Message] = []
    read: list[int] = []
    for _ in range(CONDITIONED_READS):
        want = limit - len(locked)
        ids = fastpath.ids_with_index_hint(query.exclude(pk__in=read)[:want], table,
                                           dialects.claim_index_hint(conn))
        if ids:
            locked += fastpath.with_index_hint(
                query.filter(pk__in=ids).select_for_update(skip_locked=True), table,
                dialects.primary_key_hint(conn))
        read += ids
        if len(ids) < want or len(locked) == limit:
            break
    return locked


def lock_ready_after(db: str, queue_id: int, priority: int, after_id: int,
                     limit: int) -> list[Message]:
    """``lock_ready`` continued after message ``after_id`` of priority ``priority``: the
    rest of that priority level only (see djqueue.storage.claim_resume)."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(built_sql(conn, "lock_ready_after", _lock_ready_after_sql),
                       [queue_id, int(State.READY), priority, after_id, limit])
        return load_messages(db, cursor.fetchall(), dialects.reads_datetimes_as_text(conn))


def read_by_ids(db: str, ids: Sequence[int]) -> list[Message]:
    """Messages ``ids`` (not empty) as a claim reads them, without a lock: to find the
    rows a claim cannot read (djqueue.storage.unreadable_messages)."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(_in_ids(built_sql(conn, "read_by_ids", _read_by_ids_sql), ids))
        return load_messages(db, cursor.fetchall(), dialects.reads_datetimes_as_text(conn))


def stamp_claimed(db: str, ids: Sequence[int], *, owner: str, token: str,
                  lease_end: datetime, now: datetime) -> None:
    """Mark the locked messages ``ids`` claimed by ``owner`` under lease ``token``."""
    conn = connections[db]
    adapt = conn.ops.adapt_datetimefield_value
    with conn.cursor() as cursor:
        cursor.execute(_in_ids(built_sql(conn, "stamp_claimed", _stamp_claimed_sql), ids),
                       [int(State.CLAIMED), owner, token, adapt(lease_end), adapt(now)])


def stamp_first_ready(db: str, queue_id: int, limit: int, *, owner: str, token: str,
                      lease_end: datetime, now: datetime) -> list[Message]:
    """Claim the next ``limit`` ready messages of a queue where writers are serialised
    (SQLite: see claim_engines.SerialEngine): one UPDATE stamps them, and they come back
    by ``RETURNING`` (SQLite 3.35 and later), else by their lease token; in claim order."""
    conn = connections[db]
    adapt = conn.ops.adapt_datetimefield_value
    params: list[Any] = [int(State.CLAIMED), owner, token, adapt(lease_end), adapt(now),
              queue_id, int(State.READY), limit]
    with conn.cursor() as cursor:
        if conn.features.can_return_columns_from_insert:
            cursor.execute(built_sql(conn, "stamp_first_ready_returning",
                                     _stamp_first_ready_returning_sql), params)
            rows = sorted(cursor.fetchall(), key=_claim_order)
        else:
            cursor.execute(built_sql(conn, "stamp_first_ready", _stamp_first_ready_sql), params)
            if not cursor.rowcount:
                return []
            cursor.execute(built_sql(conn, "stamped_by_token", _stamped_by_token_sql),
                           [int(State.CLAIMED), token, queue_id])
            rows = cursor.fetchall()
    return load_messages(db, rows, dialects.reads_datetimes_as_text(conn))


_PRIORITY, _ID = _ATTNAMES.index("priority"), _ATTNAMES.index("id")


def _claim_order(row: Sequence) -> tuple[int, int]:
    return -row[_PRIORITY], row[_ID]


def lock_leases(db: str, ids: Sequence[int]) -> list[tuple[int, int, str]]:
    """Lock the messages ``ids`` that still exist; their (id, state, lease token).

    Why by primary key alone: with ``state`` in the WHERE clause MySQL may scan
    the (state, visible_at) index and lock other receivers' rows."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(_in_ids(built_sql(conn, "lock_leases", _lock_leases_sql), ids))
        return cursor.fetchall()


def delete(db: str, ids: Sequence[int]) -> int:
    """Delete the messages ``ids`` (no model refers to a message: nothing cascades)."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(_in_ids(built_sql(conn, "delete", _delete_sql), ids))
        return cursor.rowcount


def load_messages(db: str, rows: Sequence[Sequence],
                  datetimes_as_text: bool = False) -> list[Message]:
    """Message instances from rows of every column in field order, as ``from_db`` makes
    them (djqueue.storage.statements.model_rows).
    ``datetimes_as_text``: the datetime columns came as ISO text (dialects.reads_datetimes_as_text)."""
    return model_rows.instances(Message, db, _ATTNAMES, rows, datetimes_as_text)


def built_sql(conn: BaseDatabaseWrapper, name: str,
              build: Callable[[BaseDatabaseWrapper], str]) -> str:
    """The statement ``name`` in ``conn``'s SQL (dialects.sql_dialect), built by ``build``
    the first time (the statements here, in limit_statements and in lookup_statements
    share the cache)."""
    key = (dialects.sql_dialect(conn), name)
    if key not in _built:
        _built[key] = build(conn)
    return _built[key]


def message_names(conn: BaseDatabaseWrapper) -> tuple[str, dict[str, str]]:
    """The message table's name and its columns' names by attribute, quoted."""
    return model_columns.quoted_table(conn, Message), model_columns.quoted(conn, Message)


def _in_ids(template: str, ids: Sequence[int]) -> str:
    """``template`` with its ``{ids}`` list filled in (see values.id_list)."""
    return template.replace("{ids}", prepared_values.id_list(ids), 1)


def _claim_select(conn: BaseDatabaseWrapper) -> str:
    """``SELECT`` every column ``FROM`` the table, datetimes as text where the vendor
    reads them so (see load_messages)."""
    table, c = message_names(conn)
    if dialects.reads_datetimes_as_text(conn):
        c = {name: f"CAST({column} AS CHAR)" if name in _DATETIMES else column
             for name, column in c.items()}
    return (f"SELECT {', '.join(c[name] for name in _ATTNAMES)} "
            f"FROM {table}{dialects.claim_index_hint(conn)} ")


def _lock_ready_sql(conn: BaseDatabaseWrapper) -> str:
    _, c = message_names(conn)
    return (f"{_claim_select(conn)}WHERE {c['queue_id']} = %s AND {c['state']} = %s "
            f"ORDER BY {c['priority']} DESC, {c['id']} ASC LIMIT %s FOR UPDATE SKIP LOCKED")


def _read_by_ids_sql(conn: BaseDatabaseWrapper) -> str:
    _, c = message_names(conn)
    return f"{_claim_select(conn)}WHERE {c['id']} IN ({{ids}})"


def _lock_ready_after_sql(conn: BaseDatabaseWrapper) -> str:
    _, c = message_names(conn)
    return (f"{_claim_select(conn)}WHERE {c['queue_id']} = %s AND {c['state']} = %s AND {c['priority']} = %s "
            f"AND {c['id']} > %s ORDER BY {c['id']} ASC LIMIT %s FOR UPDATE SKIP LOCKED")


def _stamp_claimed_sql(conn: BaseDatabaseWrapper) -> str:
    table, c = message_names(conn)
    return (f"UPDATE {table} SET {c['attempts']} = {c['attempts']} + 1, {c['state']} = %s, "
            f"{c['owner']} = %s, {c['lease_token']} = %s, {c['visible_at']} = %s, "
            f"{c['claimed_at']} = %s WHERE {c['id']} IN ({{ids}})")


def _stamp_first_ready_sql(conn: BaseDatabaseWrapper) -> str:
    """:func:`_stamp_claimed_sql` with the first ready ids chosen by a subquery."""
    table, c = message_names(conn)
    first_ready = (f"SELECT {c['id']} FROM {table} WHERE {c['queue_id']} = %s "
                   f"AND {c['state']} = %s ORDER BY {c['priority']} DESC, {c['id']} ASC LIMIT %s")
    return _stamp_claimed_sql(conn).replace("{ids}", first_ready, 1)


def _stamp_first_ready_returning_sql(conn: BaseDatabaseWrapper) -> str:
    _, c = message_names(conn)
    return (f"{_stamp_first_ready_sql(conn)} "
            f"RETURNING {', '.join(c[name] for name in _ATTNAMES)}")


def _stamped_by_token_sql(conn: BaseDatabaseWrapper) -> str:
    _, c = message_names(conn)
    return (f"{_claim_select(conn)}WHERE {c['state']} = %s AND {c['lease_token']} = %s "
            f"AND {c['queue_id']} = %s ORDER BY {c['priority']} DESC, {c['id']} ASC")


def _lock_leases_sql(conn: BaseDatabaseWrapper) -> str:
    table, c = message_names(conn)
    # SQLite has no FOR UPDATE (the ORM drops it there too): its writers are serialised.
    lock = " FOR UPDATE" if conn.features.has_select_for_update else ""
    return (f"SELECT {c['id']}, {c['state']}, {c['lease_token']} FROM {table} "
            f"WHERE {c['id']} IN ({{ids}}){lock}")


def _delete_sql(conn: BaseDatabaseWrapper) -> str:
    table, c = message_names(conn)
    return f"DELETE FROM {table} WHERE {c['id']} IN ({{ids}})"
