"""Copying finished messages into history, in the database.

One ``INSERT ... SELECT`` per batch: no row travels to Python and back, and no
History objects are built (the ORM's bulk insert cost more per message than
the raw claim-and-ack loop spends on the whole message). Table and
column names come from the models; every value is a parameter but the ids,
which are inlined as integers.

:func:`archive_leased` is the ack's fast path: the copy itself checks the
lease tokens and takes the row locks (``... FOR UPDATE``), so an ack is two
statements (copy, delete) instead of three (lock, copy, delete).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.models import Body, History, Message, Outcome, State
from djqueue.storage import dialects
from djqueue.storage.statements import model_columns, vendor_sql
from djqueue.storage.statements.prepared_values import id_list

#: History columns and, for each, the SQL (over message ``m`` and body ``b``) that fills it.
_COLUMNS = {
    "id": "m.{id}", "queue_id": "m.{queue_id}", "outcome": "%s", "priority": "m.{priority}",
    "attempts": "m.{attempts}", "size": "COALESCE({body_size}, {message_size})",
    "worker": "m.{owner}", "group_key": "m.{group_key}", "sent_at": "m.{sent_at}",
    "claimed_at": "m.{claimed_at}", "finished_at": "%s",
}


def archive(db: str, ids: list[int], outcome: Outcome, now: datetime) -> int:
    """Insert a history row for each message in ``ids``; the caller holds their row locks
    and deletes them in the same transaction. Returns the rows inserted."""
    if not ids:
        return 0
    conn = connections[db]
    sql = _sql(conn, ids)  # its finish time, and on MySQL the time a zero date becomes
    moments = [conn.ops.adapt_datetimefield_value(now)] * (sql.count("%s") - 1)
    with conn.cursor() as cursor:
        cursor.execute(sql, [int(outcome), *moments])
        return cursor.rowcount


def archive_leased(db: str, messages: Sequence[Message], outcome: Outcome,
                   now: datetime) -> int | None:
    """Lock the ``messages`` still claimed under their lease tokens and copy them into
    history, in one statement; the caller deletes them in the same transaction.
    Returns the rows copied: all of ``messages``, or fewer when some leases were lost
    (the caller then finds out which). None when the fast path does not apply:
    topic deliveries, whose shared body rows this must not lock.

    The messages of one claim share a lease token, and an ack holds a few claims at
    most, so the statement tests one token a claim, with that claim's ids: a pair of
    parameters a message cost more in the driver's quoting than the rest of the ack."""
    if any(m.stored_body_id is not None for m in messages):
        return None
    conn = connections[db]
    claims: dict[str, list[int]] = {}
    for message in messages:
        claims.setdefault(message.lease_token, []).append(message.pk)
    params: list = [int(outcome), conn.ops.adapt_datetimefield_value(now), int(State.CLAIMED),
                    *claims]
    with conn.cursor() as cursor:
        cursor.execute(_sql(conn, [m.pk for m in messages], leased=True) + _lease_test(
            conn, list(claims.values())), params)
        return cursor.rowcount


_statements: dict[tuple[str, bool], str] = {}


def _sql(conn: BaseDatabaseWrapper, ids: list[int], leased: bool = False) -> str:
    """The statement for ``ids`` (inlined as integers, see values.id_list); ``leased``:
    the copy of :func:`archive_leased`, whose lease test :func:`_lease_test` appends."""
    key = (dialects.sql_dialect(conn), leased)
    if key not in _statements:
        _statements[key] = _build_sql(conn, leased)
    return _statements[key].replace("{ids}", id_list(ids), 1)


def _lease_test(conn: BaseDatabaseWrapper, claims: list[list[int]]) -> str:
    """`` AND <the message is claimed under its claim's token> [FOR UPDATE]``: one token
    parameter for each of ``claims`` (the ids that share a token)."""
    q = conn.ops.quote_name
    state, token, pk = (q(model_columns.column(Message, name))
                        for name in ("state", "lease_token", "id"))
    if len(claims) == 1:
        test = f"m.{token} = %s"
    else:
        test = "(" + " OR ".join(f"(m.{token} = %s AND m.{pk} IN ({id_list(ids)}))"
                                 for ids in claims) + ")"
    # SQLite has no FOR UPDATE: its writers are serialised.
    return (f" AND m.{state} = %s AND {test}"
            + (" FOR UPDATE" if conn.features.has_select_for_update else ""))


def _build_sql(conn: BaseDatabaseWrapper, leased: bool) -> str:
    q = conn.ops.quote_name
    length = vendor_sql.byte_length_sql(conn.vendor)
    names = model_columns.quoted(conn, Message)
    names["message_size"] = length.format(f"m.{names['body']}")
    if leased:
        names["body_size"] = "NULL"
        source = f"{q(Message._meta.db_table)} m{dialects.primary_key_hint(conn)}"
    else:
        names["body_size"] = length.format(f"b.{q(model_columns.column(Body, 'body'))}")
        source = (f"{q(Message._meta.db_table)} m "
                  f"LEFT JOIN {q(Body._meta.db_table)} b ON b.{q(model_columns.column_of(Body._meta.pk))} = "
                  f"m.{names['stored_body_id']}")
    columns = dict(_COLUMNS)
    if not leased:  # a delete's copy, a delivery's ack's; the fast path's rows a claim read
        for name in ("sent_at", "claimed_at"):
            columns[name] = vendor_sql.copied_time_sql(conn.vendor).format(a=columns[name])
    history = model_columns.quoted(conn, History)
    return (
        f"INSERT INTO {q(History._meta.db_table)} "
        f"({', '.join(history[c] for c in columns)}) "
        f"SELECT {', '.join(e.format(**names) for e in columns.values())} "
        f"FROM {source} WHERE m.{names['id']} IN ({{ids}})")
