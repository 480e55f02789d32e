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
synchronised hosts ever are. A registered process writes its latest offset on its row
at each heartbeat (``latest_offset``), for the metrics and the workers' listing: a
fleet's clocks seen in one place.
"""

from __future__ import annotations

import logging
import math
import time

from django.db import DatabaseError, connections

from djqueue.conf import get_settings
from djqueue.storage import placement
from djqueue.storage.statements.vendor_sql import clock_sql

#: Seconds apart past which a process warns. NTP keeps hosts within milliseconds; a
#: second apart means a host whose clock nothing sets.
WARN_PAST = 1.0

#: This process's latest comparison with each database: (offset, whether it was far,
#: time.monotonic() when read). One host, one clock: every comparison the process makes
#: (its start's, its heartbeat's, its API server's) reads and adds to the same record.
_latest: dict[str, tuple[float, bool, float]] = {}


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
        _latest[db] = offset, far, time.monotonic()
        if far:
            logger.warning(
                "%s: this host's clock is %.1f s %s database %s's. Leases, delays and retry "
                "times are written and judged by the hosts' clocks, so claims may come back "
                "while still being worked on and delayed messages run off time: set this "
                "host's clock (NTP, chrony).", process, abs(offset),
                "ahead of" if offset > 0 else "behind", db,
                extra={"database": db, "clock_offset": offset})
    return offsets


def latest_offset(db: str) -> float | None:
    """This host's clock minus database ``db``'s at this process's latest comparison,
    in seconds; None before the first (and always on SQLite)."""
    latest = _latest.get(db)
    return None if latest is None else latest[0]


class ClockChecks:
    """The comparison repeated for a long-running process: ``check()`` now, and
    ``check_when_due()`` from its heartbeat or its pass, which compares again once
    CLOCK_CHECK_INTERVAL seconds have passed since the last. While a database stays far
    it is warned of at each check; when it comes back within WARN_PAST, one INFO line
    says so. It starts from the process's comparisons so far, if any (``djqueue_http``
    compares as it starts, its long polls' checks later): the first is due an interval
    after the latest of them, and a database found far then is told of when it is back."""

    def __init__(self, logger: logging.Logger, process: str) -> None:
        self.logger, self.process = logger, process
        self._due = max((at for *_, at in _latest.values()), default=-math.inf)
        self._due += get_settings().CLOCK_CHECK_INTERVAL
        self._far = {db for db, (_, far, _) in _latest.items() if far}

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
