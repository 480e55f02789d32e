"""The reads a send repeats once its caches age: its queue's row, and the wake
addresses of the workers.

A process keeps a queue's row for ``QUEUE_CACHE_TTL`` and the workers' addresses for
``WAKE_REFRESH`` (a second each by default), so one that sends less often than that
reads both again before each send. Through the ORM each read compiled its query
anew, and a send after a pause took nearly three times as long as one a moment after
the last (figures on the docs' performance page). Here each statement is written
once per vendor and runs through fastpath.select_rows; the rows become instances or
values through the fields' own converters (djqueue.storage.statements.model_rows).
"""

from __future__ import annotations

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.models import Queue, Worker
from djqueue.storage import fastpath
from djqueue.storage.statements import model_columns, model_rows
from djqueue.storage.statements.claim_statements import built_sql

#: The columns of a queue's row that its work reads: all but its creation time, which
#: only the admin and the HTTP API's attributes show (read there on access, as a
#: deferred field). One a hand edit left unreadable failed every read of the row, and
#: so every receive and worker serving that queue among others.
QUEUE_COLUMNS = tuple(f for f in Queue._meta.concrete_fields if f.attname != "created_at")
_QUEUE_ATTNAMES = tuple(f.attname for f in QUEUE_COLUMNS)


def queue_named(db: str, name: str) -> Queue | None:
    """The row of the queue ``name`` on ``db``, as ``Queue.objects.filter(name=...)`` reads it."""
    return _queue(db, "name", name)


def queue_with_id(db: str, pk: int) -> Queue | None:
    """The row of the queue with primary key ``pk`` on ``db``."""
    return _queue(db, "id", pk)


def _queue(db: str, column: str, value: object) -> Queue | None:
    conn = connections[db]
    sql = built_sql(conn, f"queue by {column}", lambda conn: _queue_sql(conn, column))
    rows = fastpath.select_rows(conn, sql, [value])
    found = model_rows.instances(Queue, db, _QUEUE_ATTNAMES, rows)
    return found[0] if found else None


def wake_addresses(db: str) -> list[tuple[str, list[str]]]:
    """Each worker's wake address and the names of its queues, for the workers on ``db``
    that listen for wake-ups (a non-empty ``wake_address``)."""
    conn = connections[db]
    sql = built_sql(conn, "wake addresses", _wake_addresses_sql)
    rows = fastpath.select_rows(conn, sql, [""])
    return [(address, queues) for address, queues in model_rows.values(
        Worker, db, ("wake_address", "queues"), rows)]


def _wake_addresses_sql(conn: BaseDatabaseWrapper) -> str:
    q = conn.ops.quote_name
    return (f"SELECT {q('wake_address')}, {q('queues')} FROM {q(Worker._meta.db_table)} "
            f"WHERE {q('wake_address')} <> %s")


def _queue_sql(conn: BaseDatabaseWrapper, column: str) -> str:
    q = conn.ops.quote_name
    columns = ", ".join(q(model_columns.column_of(f)) for f in QUEUE_COLUMNS)
    return (f"SELECT {columns} FROM {q(Queue._meta.db_table)} "
            f"WHERE {q(model_columns.column(Queue, column))} = %s")
