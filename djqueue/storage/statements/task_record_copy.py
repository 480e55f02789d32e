"""Finished tasks' records copied by the database from their message rows.

A first run of a task that succeeded needs a record whose values its message row
already holds: the task's path, backend and arguments in the body, the queue,
priority, times and worker. Inside the worker's ack, once the leases are checked
and before the acked rows are deleted, one ``INSERT ... SELECT`` a batch copies
them with the server's JSON functions; the run adds only its finish time and
return value. Every other record (a failure, a retried or deferred task, a result
id given at enqueue) is written from Python.

Why: building each record's row in Python (escaping it on MariaDB, a JSON
document of 19 columns with four ISO times on PostgreSQL, 19 parameters on
SQLite) was a tenth of a django.tasks worker's time, in a process bound by the
GIL. Per vendor: MariaDB and MySQL get the finish times and return values as
``CASE`` arms by message id, escaped by the driver (their statements carry their
values in their text); PostgreSQL and SQLite get them as one JSON parameter, read by
``json_to_recordset`` and ``json_each``. Only constants, column names from the
models and integer ids are written into the SQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.models import Message, Queue, TaskRecord, TaskStatus
from djqueue.storage import dialects
from djqueue.storage.payloads import dumps
from djqueue.storage.statements import model_columns, prepared_values, vendor_sql

#: Rows per statement.
CHUNK = 500


class RunEnd(NamedTuple):
    """What a run adds to its message's row when the ack copies its record from it."""

    message_id: int
    finished_at: datetime
    return_value: Any


def copyable_message(db: str, message: Message) -> bool:
    """Whether a success of this delivery of a task message (on database ``db``) can have
    its record copied from the message's row: a first delivery whose body, inline,
    alone describes the task (the caller checks that the record's id is the message's
    own)."""
    payload = message.payload
    return (message.attempts == 1 and not message.errors and message.stored_body_id is None
            and "task" in payload and "run_after" not in payload
            and dialects.copies_task_records(db))


def copies(db: str, message: Message, record: TaskRecord) -> bool:
    """Whether ``record``, the finished record of ``message``'s run, is one the ack can
    copy from the message's row: a first delivery's success whose record the message
    alone describes."""
    return (record.status == TaskStatus.SUCCESSFUL and not record.errors
            and record.id == str(message.pk) and copyable_message(db, message))


def copy_records(db: str, runs: Sequence[RunEnd], update_fields: Sequence[str]) -> None:
    """Write the records of ``runs`` (successes that :func:`copies` allows, or first
    runs that passed :func:`copyable_message` before they ran; their messages' rows
    locked by the caller's ack) from their message rows; an existing record gets
    ``update_fields``."""
    conn = connections[db]
    head, tail = _statement(conn, tuple(update_fields))
    for start in range(0, len(runs), CHUNK):
        chunk = runs[start:start + CHUNK]
        with conn.cursor() as cursor:
            if conn.vendor == "mysql":
                cursor.execute(_mysql_sql(conn, head, chunk) + tail)
            else:
                cursor.execute(head + tail, [TaskStatus.SUCCESSFUL.value, _runs_json(conn, chunk)])


def _runs_json(conn: BaseDatabaseWrapper, runs: Sequence[RunEnd]) -> str:
    """The parameter of PostgreSQL's and SQLite's statements: what each run adds to its
    message's row. PostgreSQL parses the values into its column types from objects;
    SQLite gets ``[message id, finish time, return value]`` arrays with the values as
    its columns store them (a datetime's text, a return value's JSON text).

    Why SQLite's is written as text: the dicts and the encoder's pass over them were a
    share of a django.tasks worker's time there. A finish time's text is digits and
    separators where the connection stores UTC as text (``prepared_values.plain_text``)
    and goes in as it is; every other value goes through the JSON encoder."""
    if conn.vendor == "postgresql":
        rows = [{"message_id": r.message_id, "finished_at": r.finished_at.isoformat(),
                 "return_value": r.return_value} for r in runs]
        return json.dumps(rows, separators=(",", ":"))
    prepare = _preparers(conn)
    finished, returned = prepare["finished_at"], prepare["return_value"]
    quote = _quoted if prepared_values.plain_text(finished) else dumps
    return "[" + ",".join([
        f'[{int(r.message_id)},{quote(finished(r.finished_at))},'
        f'{"null" if r.return_value is None else dumps(returned(r.return_value))}]'
        for r in runs]) + "]"


def _quoted(text: object) -> str:
    """A JSON string of ``text`` that has nothing to escape."""
    return f'"{text}"'


def _preparers(conn: BaseDatabaseWrapper) -> dict[str, Callable[[object], object]]:
    return dict(zip([f.attname for f in _FIELDS],
                    prepared_values.preparers(conn, TaskRecord._meta.label, _FIELDS), strict=True))


def _mysql_sql(conn: BaseDatabaseWrapper, head: str, runs: Sequence[RunEnd]) -> str:
    literal = dialects.literal_client_side(conn)
    assert literal is not None, "MySQL's driver escapes a value into SQL text"
    prepare = _preparers(conn)
    finished = " ".join(
        f"WHEN {int(r.message_id)} THEN {literal(prepare['finished_at'](r.finished_at))}"
        for r in runs)
    returned = " ".join(
        f"WHEN {int(r.message_id)} THEN {literal(prepare['return_value'](r.return_value))}"
        for r in runs if r.return_value is not None)
    message_id = f"m.{conn.ops.quote_name(model_columns.column_of(Message._meta.pk))}"
    return head.format(
        finished=f"CASE {message_id} {finished} END",
        returned=f"CASE {message_id} {returned} END" if returned else "NULL",
        status=literal(TaskStatus.SUCCESSFUL.value),
        ids=prepared_values.id_list([r.message_id for r in runs]))


_FIELDS = TaskRecord._meta.concrete_fields
_statements: dict[tuple[str, tuple[str, ...]], tuple[str, str]] = {}


def _statement(conn: BaseDatabaseWrapper, update_fields: tuple[str, ...]) -> tuple[str, str]:
    """The INSERT ... SELECT and its upsert clause. MariaDB's and MySQL's have
    ``{finished}``, ``{returned}``, ``{status}`` and ``{ids}`` to fill; PostgreSQL's and
    SQLite's take the status and :func:`_runs_json` as their two parameters."""
    key = (dialects.sql_dialect(conn), update_fields)
    if key in _statements:
        return _statements[key]
    q = conn.ops.quote_name
    m = model_columns.quoted(conn, Message, prefix="m.")
    sources = {
        "queue_name": f"q.{q(model_columns.column(Queue, 'name'))}",
        "priority": m["priority"],
        "run_after": "NULL",
        "enqueued_at": m["sent_at"],
        "started_at": m["claimed_at"],
        "last_attempted_at": m["claimed_at"],
        "message_id": m["id"],
        "unique_key": "NULL",
        "cancel_requested": "FALSE",
    }
    join_queue = (f"JOIN {q(Queue._meta.db_table)} q "
                  f"ON q.{q(model_columns.column_of(Queue._meta.pk))} = {m['queue_id']}")
    if conn.vendor == "postgresql":
        sources |= {
            "id": f"CAST({m['id']} AS text)",
            "task_path": "b.doc ->> 'task'",
            "backend": "b.doc ->> 'backend'",
            "args": "b.doc -> 'args'",
            "kwargs": "b.doc -> 'kwargs'",
            "status": "%s",
            "finished_at": "r.finished_at",
            "return_value": "r.return_value",
            "errors": "'[]'::jsonb",
            "worker_ids": f"jsonb_build_array({m['owner']})",
        }
        source = (f"FROM json_to_recordset(%s) "
                  f"AS r(message_id bigint, finished_at timestamptz, return_value jsonb) "
                  f"JOIN {q(Message._meta.db_table)} m ON {m['id']} = r.message_id "
                  f"{join_queue} CROSS JOIN LATERAL (SELECT {m['body']}::jsonb AS doc) b")
    elif conn.vendor == "sqlite":
        body, run = m["body"], "r.value"  # [message id, finish time, return value]
        sources |= {
            "id": f"CAST({m['id']} AS TEXT)",
            "task_path": f"json_extract({body}, '$.task')",
            "backend": f"json_extract({body}, '$.backend')",
            "args": f"json_extract({body}, '$.args')",
            "kwargs": f"json_extract({body}, '$.kwargs')",
            "status": "%s",
            "finished_at": f"json_extract({run}, '$[1]')",
            "return_value": f"json_extract({run}, '$[2]')",
            "errors": "'[]'",
            "worker_ids": f"json_array({m['owner']})",
        }
        # WHERE true: SQLite's grammar needs a WHERE before an upsert's ON CONFLICT.
        source = (f"FROM json_each(%s) r JOIN {q(Message._meta.db_table)} m "
                  f"ON {m['id']} = json_extract({run}, '$[0]') {join_queue} WHERE true")
    else:
        body = m["body"]
        # MySQL has JSON_VALUE from 8.0.21 only; JSON_UNQUOTE of the extract is the same.
        text = ("JSON_VALUE({}, '$.{}')" if dialects.is_mariadb(conn)
                else "JSON_UNQUOTE(JSON_EXTRACT({}, '$.{}'))")
        sources |= {
            "id": f"CAST({m['id']} AS CHAR)",
            "task_path": text.format(body, "task"),
            "backend": text.format(body, "backend"),
            "args": f"JSON_EXTRACT({body}, '$.args')",
            "kwargs": f"JSON_EXTRACT({body}, '$.kwargs')",
            "status": "{status}",
            "finished_at": "{finished}",
            "return_value": "{returned}",
            "errors": "'[]'",
            "worker_ids": f"JSON_ARRAY({m['owner']})",
        }
        source = (f"FROM {q(Message._meta.db_table)} m {join_queue} "
                  f"WHERE {m['id']} IN ({{ids}})")
    record = model_columns.columns(TaskRecord)
    selected = ", ".join(f"{sources[f.attname]} AS {q(record[f.attname])}" for f in _FIELDS)
    head = (f"INSERT INTO {q(TaskRecord._meta.db_table)} "
            f"({', '.join(q(record[f.attname]) for f in _FIELDS)}) "
            + vendor_sql.upsert_source(conn, f"SELECT {selected} {source}"))
    tail = " " + vendor_sql.upsert_clause(
        conn, model_columns.column_of(TaskRecord._meta.pk),
        [record[name] for name in update_fields], after_select=True)
    _statements[key] = head, tail
    return head, tail
