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
HTTP API server) compares its clock with every database server's as it starts and every
CLOCK_CHECK_INTERVAL seconds after (``ClockChecks``: a clock can be set wrong, or stop
being set, while a process runs), and warns when they are further apart than
synchronised hosts ever are.
"""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError, connections

from djqueue.conf import get_settings
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
    return {db: offset for db, (offset, _) in _compare(logger, process).items()}


def _compare(logger: logging.Logger, process: str) -> dict[str, tuple[float, bool]]:
    """{database: (offset, whether it is far)} for each server database that answered;
    a WARNING logged for each far one."""
    offsets = {}
    for db in placement.databases():
        if connections[db].vendor == "sqlite":
            continue
        try:
            offset, round_trip = offset_from(db)
        except DatabaseError:
            continue
        far = abs(offset) > WARN_PAST + round_trip / 2
        offsets[db] = offset, far
        if far:
            logger.warning(
                "%s: this host's clock is %.1f s %s database %s's. Leases, delays and retry "
                "times are written and judged by the hosts' clocks, so claims may come back "
                "while still being worked on and delayed messages run off time: set this "
                "host's clock (NTP, chrony).", process, abs(offset),
                "ahead of" if offset > 0 else "behind", db,
                extra={"database": db, "clock_offset": offset})
    return offsets


class ClockChecks:
    """The comparison repeated for a long-running process: ``check()`` now, and
    ``check_when_due()`` from its heartbeat or its pass, which compares again once
    CLOCK_CHECK_INTERVAL seconds have passed since the last. While a database stays far
    it is warned of at each check; when it comes back within WARN_PAST, one INFO line
    says so."""

    def __init__(self, logger: logging.Logger, process: str, *, first_due: float = 0.0) -> None:
        """``first_due``: seconds from now to the first check ``check_when_due`` makes
        (a process whose start compared the clocks already)."""
        self.logger, self.process = logger, process
        self._due = time.monotonic() + first_due
        self._far: set[str] = set()

    @property
    def due(self) -> bool:
        """Whether CLOCK_CHECK_INTERVAL has passed since the last comparison (read
        without a database, so a caller on an event loop can ask before it hops to a
        database thread)."""
        return time.monotonic() >= self._due

    def check_when_due(self) -> None:
        if self.due:
            self.check()

    def check(self) -> None:
        self._due = time.monotonic() + get_settings().CLOCK_CHECK_INTERVAL
        for db, (offset, far) in _compare(self.logger, self.process).items():
            if far:
                self._far.add(db)
            elif db in self._far:
                self._far.discard(db)
                self.logger.info("%s: this host's clock is back within %.1f s of database "
                                 "%s's", self.process, WARN_PAST, db,
                                 extra={"database": db, "clock_offset": offset})
