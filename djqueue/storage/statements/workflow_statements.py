"""The workflow join's statements that run for every step, built by hand.

``bulk_update`` of a hundred settled steps builds a ``CASE`` expression of eight
hundred ``When`` objects and resolves each: half a second of Python per ack
batch, more than the batch's database work; one UPDATE a step (executemany) is
a round trip each on MySQL's driver. Here one ``UPDATE ... CASE`` a chunk is
written as text, with values prepared by the fields' own ``get_db_prep_save``
(djqueue.storage.statements.prepared_values) and passed as parameters. Only
column names and types from the model are written into the SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.models import StepDependency, StepState, Workflow, WorkflowStep
from djqueue.storage import dialects, fastpath, unreadable_rows
from djqueue.storage.statements import model_columns, prepared_values, row_inserts

#: What settling a step writes (djqueue.tasks.workflow_joins).
SETTLED_FIELDS = ("state", "result", "error", "error_class", "message_id", "attempts",
                  "started_at", "finished_at")
#: The same for a batch of successes (their errors are empty already, and a step keeps
#: its message from when it started).
SUCCEEDED_FIELDS = ("state", "result", "attempts", "started_at", "finished_at")
#: What starting a step writes.
STARTED_FIELDS = ("state", "message_id")
#: Rows per UPDATE (SQLite: 32,766 parameters; a row takes two a field).
CHUNK = 500


def insert_edges(db: str, workflow_id: int, edges: Iterable[tuple[int, int, int]]) -> None:
    """Insert the workflow's edges, each (parent, child, position), as tuples: a chord's
    10,000 model instances took a tenth of its enqueue to build."""
    row_inserts.insert_values(db, StepDependency, _EDGE_COLUMNS, [
        (workflow_id, parent, child, position) for parent, child, position in edges])


_EDGE_COLUMNS = ("workflow_id", "parent", "child", "position")


def update_steps(db: str, steps: Sequence[WorkflowStep], fields: Sequence[str]) -> None:
    """Write ``fields`` of each of ``steps`` (rows the caller has locked), by id: one
    ``UPDATE ... SET column = CASE id WHEN ... END`` a chunk of rows."""
    conn = connections[db]
    for start in range(0, len(steps), CHUNK):
        _update_case(conn, steps[start:start + CHUNK], fields, "pk", "", [])


def settle_ready_steps(db: str, workflow_id: int, steps: Sequence[Any],
                       fields: Sequence[str]) -> list[int]:
    """Write ``fields`` of each of ``steps`` that is still READY, by position; returns the
    positions written. The caller holds the workflow's row lock. A step here is
    anything with those attributes and ``position``: the join hands its runs as they
    are, without a model instance built for each.

    One ``UPDATE ... CASE position`` a chunk, whose row count says whether every step
    was READY, which is the rule: a step settles once. When one was not, which were
    written is read back: the rows that left READY and now hold exactly the run's
    message and finish time. Another transaction cannot have written those: a
    delivery's run is settled only with its message's ack, one ack of a message
    commits, and every change to a workflow's steps holds the workflow's row lock.
    (Before, the READY steps were locked and read first: one round trip a batch more,
    a tenth of a chord member's join.)
    """
    conn = connections[db]
    written: list[int] = []
    ready = StepState.READY
    for start in range(0, len(steps), CHUNK):
        chunk = steps[start:start + CHUNK]
        count = _update_case(conn, chunk, fields, "position",
                             f"{conn.ops.quote_name('workflow_id')} = %s AND "
                             f"{conn.ops.quote_name('state')} = %s AND ", [workflow_id, ready])
        if count == len(chunk):
            written += [step.position for step in chunk]
            continue
        ours = {step.position: (step.message_id, step.finished_at) for step in chunk}
        found = unreadable_rows.values_of(WorkflowStep.objects.using(db).filter(
            workflow_id=workflow_id, position__in=list(ours)).exclude(state=ready),
            ("position", "message_id", "finished_at"))
        written += sorted(position for position, *values in found
                          if tuple(values) == ours[position])
    return written


def _update_case(conn: BaseDatabaseWrapper, chunk: Sequence[Any],
                 fields: Sequence[str], key: str, where: str, where_params: list) -> int:
    """``UPDATE ... SET column = CASE key WHEN ... END ... WHERE <where> key IN (...)``
    of one chunk; returns the row count. Keys are integers (ids the caller read, or
    positions it counted): written into the SQL as numbers, so only the values are
    parameters (each one the driver escapes)."""
    if not chunk:
        return 0
    meta = WorkflowStep._meta
    columns = [model_columns.field(WorkflowStep, name) for name in fields]
    prepare = _preparers(conn, columns)
    quote = conn.ops.quote_name
    key_field = meta.pk if key == "pk" else model_columns.field(WorkflowStep, key)
    column = quote(model_columns.column_of(key_field))
    keys = [str(int(getattr(step, key_field.attname))) for step in chunk]
    sets, params = [], []
    for function, field in zip(prepare, columns, strict=True):
        values = [function(getattr(step, field.attname)) for step in chunk]
        if all(value == values[0] for value in values):  # a batch's state, say
            sets.append(f"{quote(model_columns.column_of(field))} = %s")
            params.append(values[0])
            continue
        # PostgreSQL cannot tell a parameter's type inside CASE: it is cast.
        cast = f"::{field.db_type(conn)}" if conn.vendor == "postgresql" else ""
        sets.append(f"{quote(model_columns.column_of(field))} = CASE {column} "
                    + " ".join(f"WHEN {k} THEN %s{cast}" for k in keys) + " END")
        params += values
    with conn.cursor() as cursor:
        cursor.execute(f"UPDATE {quote(meta.db_table)} SET {', '.join(sets)} "
                       f"WHERE {where}{column} IN ({', '.join(keys)})", params + where_params)
        return cursor.rowcount


def workflow_state(db: str, workflow_id: int) -> tuple[int, str] | None:
    """A workflow's state and token, by primary key: read before each of its steps runs,
    so one statement built once, not a queryset compiled each time."""
    conn = connections[db]
    key = conn.vendor
    if key not in _state_sql:
        quote = conn.ops.quote_name
        _state_sql[key] = (f"SELECT {quote('state')}, {quote('token')} FROM "
                           f"{quote(Workflow._meta.db_table)} WHERE {quote('id')} = %s")
    with conn.cursor() as cursor:
        cursor.execute(_state_sql[key], [workflow_id])
        row = cursor.fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


_state_sql: dict[str, str] = {}


def _preparers(conn: BaseDatabaseWrapper, columns: list[models.Field]) -> list[Callable]:
    label = f"{WorkflowStep._meta.label}:" + ",".join(f.name for f in columns)
    return prepared_values.preparers(conn, label, columns)


# The settle of a batch (djqueue.tasks.workflow_joins.settle), statement by statement.
# Each runs in the worker's ack transaction, once an ack batch: as queryset calls they
# were more of the batch's time in Python than in the database.

def _sql(conn: BaseDatabaseWrapper, name: str, build: Callable[[Callable[[str], str]], str],
         ) -> str:
    key = (dialects.sql_dialect(conn), name)
    if key not in _built:
        _built[key] = build(conn.ops.quote_name)
    return _built[key]


_built: dict[tuple[str, str], str] = {}


def _for_update(conn: BaseDatabaseWrapper) -> str:
    return " FOR UPDATE" if conn.features.has_select_for_update else ""


def _in(count: int) -> str:
    return ", ".join(["%s"] * count)


def children_of(db: str, workflow_id: int, parents: Sequence[int]) -> dict[int, int]:
    """The children of the steps at ``parents``: position -> how many of them it has
    among ``parents`` (a chord's callback: one row for the whole batch)."""
    conn = connections[db]
    table = StepDependency._meta.db_table
    sql = _sql(conn, "children", lambda q: (
        f"SELECT {q('child')}, COUNT(*) FROM {q(table)} WHERE {q('workflow_id')} = %s "
        f"AND {q('parent')} IN ({{}}) GROUP BY {q('child')}"))
    with conn.cursor() as cursor:
        cursor.execute(sql.format(_in(len(parents))), [workflow_id, *parents])
        return {int(child): int(count) for child, count in cursor.fetchall()}


def count_down(db: str, workflow_id: int, counts: dict[int, int]) -> list[int]:
    """Take ``counts[position]`` off each child's ``parents_left``, in position order (the
    order every join locks them); returns the positions of those now waiting for none."""
    conn = connections[db]
    table = WorkflowStep._meta.db_table
    update = _sql(conn, "count_down", lambda q: (
        f"UPDATE {q(table)} SET {q('parents_left')} = {q('parents_left')} - %s "
        f"WHERE {q('workflow_id')} = %s AND {q('position')} = %s"))
    zero = _sql(conn, "no_parents_left", lambda q: (
        f"SELECT {q('position')} FROM {q(table)} WHERE {q('workflow_id')} = %s "
        f"AND {q('state')} = %s AND {q('parents_left')} = 0 AND {q('position')} IN ({{}})"))
    children = sorted(counts)
    with conn.cursor() as cursor:
        for child in children:
            cursor.execute(update, [counts[child], workflow_id, child])
        cursor.execute(zero.format(_in(len(children))), [workflow_id, StepState.WAITING,
                                                         *children])
        return sorted(int(position) for (position,) in cursor.fetchall())


def lock_workflows(db: str, ids: Sequence[int]) -> list[Workflow]:
    """The workflows ``ids``, locked in id order, with what the join reads and writes.
    ``finished_at`` comes as the driver returns it (a datetime, or SQLite's text): the
    join only asks whether it is set, and never writes it back (save_workflow). One
    that no driver reads back (a hand edit) is read as unset, as MariaDB's driver
    reads a zero date: the join ends the workflow as usual, and writes a time that
    reads (djqueue.storage.unreadable_rows)."""
    conn = connections[db]
    sql = _sql(conn, "lock_workflows", lambda q: (
        f"SELECT {', '.join(q(c) for c in _LOCKED)} FROM {q(Workflow._meta.db_table)} "
        f"WHERE {q('id')} IN ({{}}) ORDER BY {q('id')}" + _for_update(conn)))
    with conn.cursor() as cursor:
        cursor.execute(sql.format(_in(len(ids))), list(ids))
        try:
            rows = cursor.fetchall()
        except unreadable_rows.UNREADABLE:  # the rows are locked: read them again
            return unreadable_rows.read_rows(Workflow.objects.using(db).filter(
                pk__in=list(ids)).only(*_LOCKED).order_by("id"))
    return [_locked(**dict(zip(_LOCKED, row, strict=True))) for row in rows]


_LOCKED = ("id", "state", "policy", "token", "steps_total", "steps_left", "failed", "error",
           "finished_at")
_locked = fastpath.builder(Workflow)


def save_counters(db: str, workflow: Workflow, fields: Sequence[str]) -> None:
    """Write ``fields`` of the workflow's row (its counters and state), by id."""
    conn = connections[db]
    meta = Workflow._meta
    columns = [model_columns.field(Workflow, name) for name in fields]
    prepare = prepared_values.preparers(conn, f"{meta.label}:" + ",".join(fields), columns)
    sql = _sql(conn, "save:" + ",".join(fields), lambda q: (
        f"UPDATE {q(meta.db_table)} SET "
        + ", ".join(f"{q(model_columns.column_of(f))} = %s" for f in columns)
        + f" WHERE {q('id')} = %s"))
    with conn.cursor() as cursor:
        cursor.execute(sql, [function(getattr(workflow, f.attname))
                             for function, f in zip(prepare, columns, strict=True)]
                       + [workflow.pk])
