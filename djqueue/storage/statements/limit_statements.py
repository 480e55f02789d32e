"""The statements a limited claim runs on every batch, built once per database vendor.

See djqueue.storage.claim_limits. Why not the ORM here: a limited claim runs two
statements more than a plain one, and compiling them through the ORM cost more
than running them (measured with a never-reached concurrency limit of 1,000:
0.85 of the plain worker's rate through the ORM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.models import Message, QueueLimiter, State
from djqueue.storage.statements import model_columns
from djqueue.storage.statements.claim_statements import built_sql
from djqueue.storage.statements.vendor_sql import locked_clock_sql

#: The limiter's columns a claim reads, in this order, then the database's clock.
READ = ("tokens", "refilled_at", "held_back", "throttled_since", "throttled_seconds",
        "claimed_bound", "counted_at", *QueueLimiter.COPIED)


@dataclass
class LimiterRow:
    """A locked QueueLimiter row as the claim reads it, with the database's clock."""

    queue_id: int
    tokens: float
    refilled_at: float
    held_back: int
    throttled_since: float | None
    throttled_seconds: float
    claimed_bound: int
    counted_at: float
    rate_limit: str
    rate_burst: int | None
    concurrency_limit: int | None
    group_rate_limit: str
    group_rate_burst: int | None
    clock: float


def lock_limiter(db: str, queue_id: int, *, skip_locked: bool) -> LimiterRow | None:
    """Lock the queue's limiter row until the transaction ends (passing over it if another
    transaction holds it and ``skip_locked``); None if there is no row (or it was
    passed over)."""
    conn = connections[db]
    name = "lock_limiter_skip" if skip_locked else "lock_limiter"
    with conn.cursor() as cursor:
        cursor.execute(built_sql(conn, name, lambda c: _lock_limiter_sql(c, skip_locked)), [queue_id])
        row = cursor.fetchone()
    if row is None:
        return None
    values = dict(zip(READ, row[:-1], strict=True))
    return LimiterRow(queue_id=queue_id, clock=float(row[-1]), **values)


def count_claimed(db: str, queue_id: int) -> int:
    """How many of the queue's messages are claimed now (index djqueue_msg_claim)."""
    conn = connections[db]
    with conn.cursor() as cursor:
        cursor.execute(built_sql(conn, "count_claimed", _count_claimed_sql),
                       [queue_id, int(State.CLAIMED)])
        return int(cursor.fetchone()[0])


def update_limiter(db: str, queue_id: int, values: dict[str, Any]) -> None:
    """Write ``values`` (QueueLimiter fields) into the queue's limiter row."""
    conn = connections[db]
    names = tuple(sorted(values))
    with conn.cursor() as cursor:
        cursor.execute(built_sql(conn, "update_limiter:" + ",".join(names),
                            lambda c: _update_limiter_sql(c, names)),
                       [*(values[n] for n in names), queue_id])


def _update_limiter_sql(conn: BaseDatabaseWrapper, names: tuple[str, ...]) -> str:
    q = conn.ops.quote_name
    sets = ", ".join(f"{q(model_columns.column(QueueLimiter, n))} = %s" for n in names)
    return f"UPDATE {q(QueueLimiter._meta.db_table)} SET {sets} WHERE {q('queue_id')} = %s"


def _lock_limiter_sql(conn: BaseDatabaseWrapper, skip_locked: bool) -> str:
    q = conn.ops.quote_name
    columns = ", ".join(q(model_columns.column(QueueLimiter, n)) for n in READ)
    # SQLite has no FOR UPDATE: its writers are serialised.
    lock = ""
    if conn.features.has_select_for_update:
        lock = " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"
    return (f"SELECT {columns}, {locked_clock_sql(conn.vendor)} "
            f"FROM {q(QueueLimiter._meta.db_table)} WHERE {q('queue_id')} = %s{lock}")


def _count_claimed_sql(conn: BaseDatabaseWrapper) -> str:
    q = conn.ops.quote_name
    return (f"SELECT COUNT(*) FROM {q(Message._meta.db_table)} "
            f"WHERE {q('queue_id')} = %s AND {q('state')} = %s")
