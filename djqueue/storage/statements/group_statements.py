"""The statements that hand an ordered group (or a key under ``group_concurrency``) on
to its next message: djqueue.storage.ordered_groups calls them with the groups'
rows locked.

Why not the ORM: an ack of an ordered queue's message runs all of them, and an
exactly-once run acks one message a transaction, so their compilation was most
of such a run's CPU (about 1.9 ms of it a keyed message on MariaDB, 2026-11-28).
They are plain SQL every vendor runs alike; keys are always parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.models import GROUP_HOLDING_STATES, MessageGroup, State
from djqueue.storage.statements import model_columns, prepared_values, vendor_sql
from djqueue.storage.statements.claim_statements import built_sql, message_names


def lock_rows(db: str, groups: Sequence[tuple[int, str]], now: datetime) -> None:
    """Create-or-lock the rows of ``groups`` ((queue id, key) pairs, locked in this
    order) until the transaction ends, stamping their ``touched_at`` with ``now``.

    Why an upsert: it takes the row's exclusive lock in one statement whether or not
    the row existed. Insert-then-select-for-update would, on InnoDB, take a shared
    lock on the duplicate first and deadlock with a second sender upgrading the
    same way. A new row starts with no tokens, as the model's defaults say."""
    conn = connections[db]
    touched = conn.ops.adapt_datetimefield_value(now)
    params: list[Any] = []
    for queue_id, key in groups:
        params += [queue_id, key, touched]
    with conn.cursor() as cursor:
        cursor.execute(built_sql(conn, "group_lock_rows", _lock_rows_sql).replace(
            "{rows}", ", ".join(["(%s, %s, %s, 0, 0)"] * len(groups))), params)


def raise_last_acked(db: str, queue_id: int, tops: dict[str, int]) -> None:
    """Move each key's ``last_acked_id`` up to its newest acked message (never down)."""
    conn = connections[db]
    keys = sorted(tops)
    table, column = _group_names(conn)
    last, key = column["last_acked_id"], column["key"]
    newest = " ".join(
        f"WHEN %s THEN CASE WHEN COALESCE({last}, 0) < %s THEN %s ELSE {last} END"
        for _ in keys)
    params: list[Any] = []
    for k in keys:
        params += [k, tops[k], tops[k]]
    with conn.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {last} = CASE {key} {newest} ELSE {last} END "
                       f"WHERE {column['queue_id']} = %s AND {key} IN ({_marks(keys)})",
                       [*params, queue_id, *keys])


def holders(db: str, queue_id: int, keys: Sequence[str]) -> dict[str, int]:
    """How many messages hold each of ``keys`` (ready, scheduled or claimed); absent:
    none."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(built_sql(conn, "group_holders", _holders_sql)
                       .replace("{keys}", _marks(keys)), [queue_id, *keys])
        return dict(cursor.fetchall())


def waiting_heads(db: str, queue_id: int, keys: Sequence[str]) -> list[int]:
    """The oldest waiting message of each of ``keys`` that has one."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(built_sql(conn, "group_waiting_heads", _heads_sql)
                       .replace("{keys}", _marks(keys)), [queue_id, *keys])
        return [head for (head,) in cursor.fetchall()]


def promote(db: str, ids: Sequence[int], now: datetime) -> int:
    """Let the waiting messages ``ids`` hold their groups: READY, or SCHEDULED while
    their delay runs. Returns how many were still waiting."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(built_sql(conn, "group_promote", _promote_sql)
                       .replace("{ids}", prepared_values.id_list(ids)),
                       [conn.ops.adapt_datetimefield_value(now)])
        return cursor.rowcount


def _marks(values: Sequence[object]) -> str:
    return ", ".join(["%s"] * len(values))


def _group_names(conn: BaseDatabaseWrapper) -> tuple[str, dict[str, str]]:
    return (model_columns.quoted_table(conn, MessageGroup),
            model_columns.quoted(conn, MessageGroup))


def _lock_rows_sql(conn: BaseDatabaseWrapper) -> str:
    table, c = _group_names(conn)
    columns = ["queue_id", "key", "touched_at", "tokens", "refilled_at"]
    unique = [model_columns.column(MessageGroup, name) for name in ("queue", "key")]
    return (f"INSERT INTO {table} ({', '.join(c[n] for n in columns)}) VALUES {{rows}} "
            + vendor_sql.upsert_clause(conn, unique,
                                       [model_columns.column(MessageGroup, "touched_at")]))


def _holders_sql(conn: BaseDatabaseWrapper) -> str:
    table, c = message_names(conn)
    states = ", ".join(str(int(s)) for s in GROUP_HOLDING_STATES)
    return (f"SELECT {c['group_key']}, COUNT(*) FROM {table} WHERE {c['queue_id']} = %s "
            f"AND {c['group_key']} IN ({{keys}}) AND {c['state']} IN ({states}) "
            f"GROUP BY {c['group_key']}")


def _heads_sql(conn: BaseDatabaseWrapper) -> str:
    table, c = message_names(conn)
    return (f"SELECT MIN({c['id']}) FROM {table} WHERE {c['queue_id']} = %s "
            f"AND {c['group_key']} IN ({{keys}}) AND {c['state']} = {int(State.WAITING)} "
            f"GROUP BY {c['group_key']}")


def _promote_sql(conn: BaseDatabaseWrapper) -> str:
    table, c = message_names(conn)
    return (f"UPDATE {table} SET {c['state']} = CASE WHEN {c['visible_at']} > %s "
            f"THEN {int(State.SCHEDULED)} ELSE {int(State.READY)} END "
            f"WHERE {c['id']} IN ({{ids}}) AND {c['state']} = {int(State.WAITING)}")
