"""How far this host's clock is from a database server's, and a warning when it is far.

Why it matters: a lease's end, a delay, a retry's time and an expiry are written from
the clock of the process that writes them (a claim stamps its lease's end; a failure,
its retry's time) and judged by the clock of the process that reads them (the reaper
returns a claim whose lease end has passed on its own clock, and makes a delayed
message ready when its time has come on its own clock). Hosts whose clocks differ by
more than a lease return claims still being worked on: a second delivery, never a loss,
as at-least-once allows, but avoidable. Delays run early or late by the difference.

Rate limits read the database's clock in their statements (docs/limits.md); the other
times are the hosts'. So each process that writes or judges them (worker, reaper,
HTTP API server) compares its clock with every database server's once as it starts,
and warns when they are further apart than synchronised hosts ever are.
"""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError, connections

from djqueue.storage import placement
from djqueue.storage.statements.vendor_sql import clock_sql

#: Seconds apart past which a process warns. NTP keeps hosts within milliseconds; a
#: second apart means a host whose clock nothing sets.
WARN_PAST = 1.0


def offset_from(db: str) -> tuple[float, float]:
    """(this host's clock minus database ``db``'s, in seconds; the read's round trip).
    The database's reading is set against the middle of the round trip."""
    connection = connections[db]
    with connection.cursor() as cursor:
        before = time.time()
        cursor.execute(f"SELECT {clock_sql(connection.vendor)}")
        after = time.time()
        [database_now] = cursor.fetchone()
    return (before + after) / 2 - float(database_now), after - before


def warn_if_far(logger: logging.Logger, process: str) -> dict[str, float]:
    """Compare this host's clock with each database server's (SQLite is on this host);
    log a WARNING for each that is more than WARN_PAST seconds (and half the read's
    round trip) apart. Returns the offsets read, by database. A database that does not
    answer is passed over: the process's own start says so, or its heartbeat later."""
    offsets = {}
    for db in placement.databases():
        if connections[db].vendor == "sqlite":
            continue
        try:
            offset, round_trip = offset_from(db)
        except DatabaseError:
            continue
        offsets[db] = offset
        if abs(offset) > WARN_PAST + round_trip / 2:
            logger.warning(
                "%s: this host's clock is %.1f s %s database %s's. Leases, delays and retry "
                "times are written and judged by the hosts' clocks, so claims may come back "
                "while still being worked on and delayed messages run off time: set this "
                "host's clock (NTP, chrony).", process, abs(offset),
                "ahead of" if offset > 0 else "behind", db,
                extra={"database": db, "clock_offset": offset})
    return offsets
