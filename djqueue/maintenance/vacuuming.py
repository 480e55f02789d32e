"""PostgreSQL: vacuum djqueue's busiest tables when their dead rows pile up, and
analyze them when their rows have outgrown the planner's statistics.

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

A queue's table swings from empty to a large backlog and back. A vacuum or an
analyze that runs while the queue is empty leaves the planner believing the table
holds a handful of rows (``pg_class.reltuples``). When a burst of messages then
arrives, the planner sorts the whole backlog for every claim instead of reading the
claim index in order: on PostgreSQL 15, a claim of 500 from a backlog of 200,000
took 120 ms and spilled 36 MB to disk, against 0.4 ms on fresh statistics, and the
drain ran a quarter slower until the next analyze. So the reaper also runs
``ANALYZE`` on a hot table whose live rows (the server's running count) have grown
past twice the planner's figure by ``STALE_STATISTICS_ROWS``. Autovacuum's own
analyze would come too, but only at its next round (``autovacuum_naptime``, a
minute by default), and never when autovacuum is off.

Neither VACUUM nor ANALYZE takes a lock that stops inserts, updates, deletes or
claims. On MySQL/MariaDB (InnoDB's purge thread, and its statistics recalculated
after a tenth of a table changed) and SQLite, nothing here runs.
"""

from __future__ import annotations

import logging
import threading
from typing import NamedTuple

from django.db import DatabaseError, connections

from djqueue.conf import get_settings
from djqueue.models import Message, MessageGroup, QueueLimiter, QueueStat, TaskRecord

logger = logging.getLogger("djqueue.reaper")

#: A table is analyzed once its live rows exceed the planner's figure by this many and
#: by more than that figure again. Below a thousand rows any plan of a claim is fast.
STALE_STATISTICS_ROWS = 1_000
#: The two statements the reaper runs (an Upkeep's ``statement``).
VACUUM, ANALYZE = "VACUUM (ANALYZE)", "ANALYZE"


def hot_tables() -> list[str]:
    """The tables whose rows are rewritten per message or per batch."""
    return [model._meta.db_table for model in (Message, MessageGroup, QueueLimiter, QueueStat,
                                               TaskRecord)]


class TableCounts(NamedTuple):
    """One hot table's row counts, as the server keeps them."""

    #: Dead row versions (``n_dead_tup``): what a vacuum would make room of.
    dead: int
    #: Live rows (``n_live_tup``), the server's running count.
    live: int
    #: The planner's figure (``pg_class.reltuples``; 0 before the first analyze).
    planned: int

    @property
    def outgrown(self) -> int:
        """Live rows past the planner's figure, when they exceed it by at least
        ``STALE_STATISTICS_ROWS`` and by more than that figure again; else 0."""
        past = self.live - self.planned
        return past if past >= STALE_STATISTICS_ROWS and self.live > 2 * self.planned else 0


def table_counts(db: str) -> dict[str, TableCounts]:
    """Each hot table's counts, in one read of the server's statistics."""
    with connections[db].cursor() as cursor:
        cursor.execute("SELECT s.relname, s.n_dead_tup, s.n_live_tup, GREATEST(c.reltuples, 0) "
                       "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
                       "WHERE s.relname = ANY(%s)", [hot_tables()])
        return {name: TableCounts(int(dead), int(live), int(planned))
                for name, dead, live, planned in cursor.fetchall()}


class Upkeep(NamedTuple):
    """A statement the reaper started on a table, and why: ``rows`` is the table's dead
    rows (VACUUM) or its live rows past the planner's figure (ANALYZE)."""

    table: str
    rows: int
    statement: str


class Vacuuming:
    """The reaper's upkeep of the hot tables: a check of their dead rows and of their
    statistics, and at most one VACUUM or ANALYZE at a time, in the background."""

    def __init__(self) -> None:
        self._running: threading.Thread | None = None
        #: Every statement started, for the log and the tests.
        self.started: list[Upkeep] = []

    def step(self, db: str) -> Upkeep | None:
        """Start what the hot tables need most, if anything, and return it: a vacuum of
        the table with the most dead rows past ``VACUUM_DEAD_ROWS``; else an analyze of
        the table whose live rows most outgrew the planner's figure. The analyze does
        not depend on ``VACUUM_DEAD_ROWS``: a misjudged claim costs as much with
        autovacuum on. (A vacuum analyzes too.)"""
        if self._busy(db):
            return None
        counts = table_counts(db)
        threshold = get_settings().VACUUM_DEAD_ROWS
        if threshold is not None:
            over = [(c.dead, table) for table, c in counts.items() if c.dead >= threshold]
            if over:
                dead, table = max(over)
                return self._start(db, VACUUM, table, dead)
        outgrown = [(c.outgrown, table) for table, c in counts.items() if c.outgrown]
        if outgrown:
            past, table = max(outgrown)
            return self._start(db, ANALYZE, table, past)
        return None

    def _busy(self, db: str) -> bool:
        """Whether this step has nothing to do: not PostgreSQL, or a statement running."""
        return (connections[db].vendor != "postgresql"
                or (self._running is not None and self._running.is_alive()))

    def _start(self, db: str, statement: str, table: str, rows: int) -> Upkeep:
        upkeep = Upkeep(table, rows, statement)
        self.started.append(upkeep)
        self._running = threading.Thread(target=_maintain, args=(db, upkeep), daemon=True,
                                         name="djqueue-vacuum")
        self._running.start()
        return upkeep

    def wait(self, timeout: float | None = None) -> None:
        if self._running is not None:
            self._running.join(timeout)


def _maintain(db: str, upkeep: Upkeep) -> None:
    table, rows, statement = upkeep
    conn = connections[db]  # this thread's own connection
    try:
        with conn.cursor() as cursor:
            # A statement and a table name from this module and the models, quoted;
            # VACUUM cannot run in a transaction, and this connection is in autocommit.
            cursor.execute(f"{statement} {conn.ops.quote_name(table)}")
        if statement == ANALYZE:
            logger.info("Analyzed %s (%d live rows past the planner's figure)", table, rows,
                        extra={"table": table})
        else:
            logger.info("Vacuumed %s (%d dead rows)", table, rows, extra={"table": table})
    except DatabaseError:
        logger.exception("%s of %s failed", statement, table)
    finally:
        conn.close()
