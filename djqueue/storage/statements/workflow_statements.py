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

from collections.abc import Callable, Sequence

from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.models import Workflow, WorkflowStep
from djqueue.storage.statements import prepared_values

#: What settling a step writes (djqueue.tasks.workflow_joins).
SETTLED_FIELDS = ("state", "result", "error", "error_class", "message_id", "attempts",
                  "started_at", "finished_at")
#: The same for a batch of successes (their errors are empty already).
SUCCEEDED_FIELDS = ("state", "result", "message_id", "attempts", "started_at", "finished_at")
#: What starting a step writes.
STARTED_FIELDS = ("state", "message_id")
#: Rows per UPDATE (SQLite: 32,766 parameters; a row takes two a field).
CHUNK = 500


def update_steps(db: str, steps: Sequence[WorkflowStep], fields: Sequence[str]) -> None:
    """Write ``fields`` of each of ``steps`` (rows the caller has locked), by id: one
    ``UPDATE ... SET column = CASE id WHEN ... END`` a chunk of rows."""
    if not steps:
        return
    conn = connections[db]
    meta = WorkflowStep._meta
    columns = [meta.get_field(name) for name in fields]
    prepare = _preparers(conn, columns)
    quote = conn.ops.quote_name
    pk = quote(meta.pk.column)
    for start in range(0, len(steps), CHUNK):
        chunk = steps[start:start + CHUNK]
        arms = " ".join(["WHEN %s THEN %s"] * len(chunk))
        sets, params = [], []
        for function, field in zip(prepare, columns, strict=True):
            # PostgreSQL cannot tell a parameter's type inside CASE: it is cast.
            cast = f"::{field.db_type(conn)}" if conn.vendor == "postgresql" else ""
            sets.append(f"{quote(field.column)} = CASE {pk} "
                        + arms.replace("THEN %s", f"THEN %s{cast}") + " END")
            for step in chunk:
                params += [step.pk, function(getattr(step, field.attname))]
        ids = ", ".join(["%s"] * len(chunk))
        with conn.cursor() as cursor:
            cursor.execute(f"UPDATE {quote(meta.db_table)} SET {', '.join(sets)} "
                           f"WHERE {pk} IN ({ids})", params + [s.pk for s in chunk])


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
