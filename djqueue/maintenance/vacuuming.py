"""PostgreSQL: vacuum djqueue's busiest tables when their dead rows pile up.

Every claim updates a message row and every ack deletes it. On PostgreSQL each
leaves a dead row version and dead index entries, and only a vacuum makes that
room reusable. Measured on PostgreSQL 15 with autovacuum off: an empty queue
held 98 MB of table and 93 MB of indexes after 600,000 messages had passed, and
a 50,000-message drain fell from about 12,000 to 5,600 a second. A VACUUM
brought it back.

Two things keep the tables small:

- Migration 0014 gives these tables their own autovacuum settings. A vacuum
  starts after 5,000 dead rows, whatever the table's size, and runs without
  cost-based pauses.
- When the server's autovacuum is off (a setting per table cannot turn it on),
  the reaper runs ``VACUUM (ANALYZE)`` on a table whose dead rows pass
  ``VACUUM_DEAD_ROWS``. It runs on a thread and connection of its own, so the
  reaper's other work (returning dead workers' claims) does not wait for it.
  The reaper also vacuums when autovacuum is on but has fallen behind by that
  much.

VACUUM takes no lock that stops inserts, updates, deletes or claims. On
MySQL/MariaDB (InnoDB's purge thread) and SQLite, nothing here runs.
"""

from __future__ import annotations

import logging
import threading

from django.db import DatabaseError, connections

from djqueue.conf import get_settings
from djqueue.models import Message, MessageGroup, QueueLimiter, QueueStat, TaskRecord

logger = logging.getLogger("djqueue.reaper")


def hot_tables() -> list[str]:
    """The tables whose rows are rewritten per message or per batch."""
    return [model._meta.db_table for model in (Message, MessageGroup, QueueLimiter, QueueStat,
                                               TaskRecord)]


def dead_rows(db: str) -> dict[str, int]:
    """Dead row versions of each hot table, as the server's statistics count them."""
    with connections[db].cursor() as cursor:
        cursor.execute("SELECT relname, n_dead_tup FROM pg_stat_user_tables "
                       "WHERE relname = ANY(%s)", [hot_tables()])
        return {name: int(count) for name, count in cursor.fetchall()}


class Vacuuming:
    """The reaper's vacuum step: a check of the dead rows, and at most one vacuum at a time,
    in the background."""

    def __init__(self) -> None:
        self._running: threading.Thread | None = None
        #: (table, dead rows before) of each vacuum started, for the log and the tests.
        self.started: list[tuple[str, int]] = []

    def step(self, db: str) -> int:
        """Start a vacuum of the table with the most dead rows past the threshold; returns
        1 if one started."""
        threshold = get_settings().VACUUM_DEAD_ROWS
        if threshold is None or connections[db].vendor != "postgresql":
            return 0
        if self._running is not None and self._running.is_alive():
            return 0
        over = [(count, table) for table, count in dead_rows(db).items() if count >= threshold]
        if not over:
            return 0
        count, table = max(over)
        self.started.append((table, count))
        self._running = threading.Thread(target=_vacuum, args=(db, table, count), daemon=True,
                                         name="djqueue-vacuum")
        self._running.start()
        return 1

    def wait(self, timeout: float | None = None) -> None:
        if self._running is not None:
            self._running.join(timeout)


def _vacuum(db: str, table: str, dead: int) -> None:
    conn = connections[db]  # this thread's own connection
    try:
        with conn.cursor() as cursor:
            # A table name from the models, quoted; VACUUM cannot run in a transaction,
            # and this thread's connection is in autocommit.
            cursor.execute(f"VACUUM (ANALYZE) {conn.ops.quote_name(table)}")
        logger.info("Vacuumed %s (%d dead rows)", table, dead, extra={"table": table})
    except DatabaseError:
        logger.exception("Vacuum of %s failed", table)
    finally:
        conn.close()
