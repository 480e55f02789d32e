"""Per-minute counters of each queue, added to in the caller's transaction.

A failed delivery is counted where it is recorded (djqueue.storage.transitions),
so the roll-ups (djqueue.monitoring.rollups) need not find failures again; both
write through :func:`add_to_minutes`, one upsert that adds to the minute's row.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connections

from djqueue.models import Period, QueueStat
from djqueue.models.stats import TOTAL_START
from djqueue.storage.statements import vendor_sql

COUNTERS = ["sent", "acked", "deleted", "failed", "dead_lettered", "wait_total", "run_total"]
HISTOGRAMS = ["wait_hist", "run_hist"]
#: Rows a statement of :func:`add_counters` (keeps SQLite's parameters under its limit).
CHUNK = 500
_STAT_COLUMNS = ["queue_id", "period", "start", *COUNTERS, *HISTOGRAMS]


def minute_of(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(second=0, microsecond=0)


def count_failure(db: str, queue_id: int, at: datetime, *, dead: bool) -> None:
    """Count one failed delivery (and its dead-lettering) in the current transaction."""
    add_to_minutes(db, {(queue_id, minute_of(at)): {"failed": 1, "dead_lettered": int(dead)}})


def add_to_minutes(db: str, additions: dict[tuple[int, datetime], dict[str, float]]) -> None:
    """Add each (queue id, minute) entry's counters to that minute's statistics row, and
    to the queue's all-time row (Period.TOTAL)."""
    if not additions:
        return
    conn = connections[db]
    totals: dict[tuple[int, datetime], dict[str, float]] = {}
    for (queue_id, _), values in additions.items():
        total = totals.setdefault((queue_id, TOTAL_START), {})
        for name, value in values.items():
            total[name] = total.get(name, 0) + value
    rows = [(Period.MINUTE, key, values) for key, values in additions.items()]
    rows += [(Period.TOTAL, key, values) for key, values in totals.items()]
    # In the unique key's order (queue, period, start), as InnoDB locks them: concurrent
    # upserts of overlapping rows then take their locks in one order.
    rows.sort(key=lambda row: (row[1][0], row[0], row[1][1]))
    params = [[queue_id, period, conn.ops.adapt_datetimefield_value(start),
               *(values.get(name, 0) for name in COUNTERS), "{}", "{}"]
              for period, (queue_id, start), values in rows]
    add_counters(db, QueueStat._meta.db_table, ["queue_id", "period", "start"], _STAT_COLUMNS,
                 COUNTERS, params)


def add_counters(db: str, table: str, keys: list[str], columns: list[str], counters: list[str],
                 rows: list[list]) -> None:
    """Insert ``rows`` of ``columns`` into ``table``, in statements of up to CHUNK rows;
    a row whose ``keys`` exist adds its ``counters`` to that row's instead
    (vendor_sql.add_counters_sql). No two rows may share their keys."""
    conn = connections[db]
    with conn.cursor() as cursor:
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start:start + CHUNK]
            cursor.execute(vendor_sql.add_counters_sql(conn, table, keys, columns, counters,
                                                       len(chunk)),
                           [value for row in chunk for value in row])
