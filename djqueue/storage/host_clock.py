"""How far this host's clock is from a database server's; times by the server's clock.

Why it matters: a lease's end, a delay, a retry's time, an expiry and a heartbeat are
written by one process (a claim stamps its lease's end; a failure, its retry's time)
and judged by another (the reaper returns a claim whose lease end has passed, makes a
delayed message ready when its time has come, and counts a worker whose heartbeat is
too old as dead). Stamped and judged by hosts' clocks that differ by more than a
lease, claims still being worked on would come back: a second delivery, never a loss,
as at-least-once allows, but avoidable; and delays would run early or late.

So each long-running process that writes or judges them (worker, reaper, HTTP API
server, a process waiting in receive) compares its clock with every database server's
as it starts and every CLOCK_CHECK_INTERVAL seconds after (``ClockChecks``: a clock can
be set wrong, or stop being set, while a process runs), warns when they are further
apart than synchronised hosts ever are, and stamps and judges those times by the
server's clock (``database_now``: the server's time at the latest comparison, carried
on by a clock no one sets). Any other process (a web process that sends, or receives
without waiting) compares as it first needs the time of a database, and again once
CLOCK_CHECK_INTERVAL has passed: a connection and a query, once in ten minutes by
default, on a thread of its own. Every process also compares at once when its time of
day steps against the clock the server's time is carried on (``database_now`` says
why). Rate limits read the database's clock in their statements
(docs/limits.md). A registered process writes its latest offset on its row at each
heartbeat (``latest_offset``), for the metrics and the workers' listing: a fleet's
clocks seen in one place.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from datetime import UTC, datetime, tzinfo
from functools import cache
from typing import Any, NamedTuple

from django.conf import settings
from django.core.signals import setting_changed
from django.db import DatabaseError, connections
from django.dispatch import receiver

from djqueue.conf import get_settings
from djqueue.storage import placement
from djqueue.storage.clock_reads import STEADY, read_clock
from djqueue.storage.database_vendors import vendor_of

#: Seconds apart past which a process warns. NTP keeps hosts within milliseconds; a
#: second apart means a host whose clock nothing sets.
WARN_PAST = 1.0


class Comparison(NamedTuple):
    """This process's latest comparison with a database."""

    offset: float  #: this host's clock minus the database's, in seconds
    at: float  #: time.monotonic() when read
    base: float  #: the database's clock minus the steady clock, then
    #: WARN_PAST and half the read's round trip: the database's clock was read somewhere
    #: within the round trip, so two clocks read this far apart may be the same.
    margin: float

    @property
    def far(self) -> bool:
        """Whether the two clocks were past ``margin`` apart."""
        return abs(self.offset) > self.margin


#: This process's latest comparison with each database. One host, one clock: every
#: comparison the process makes (its start's, its heartbeat's, its API server's) reads
#: and adds to the same record.
_latest: dict[str, Comparison] = {}

#: The logger and the process's name of a ClockChecks running in this process, if one
#: runs: then it compares on its schedule, ``database_now`` compares by itself only a
#: database not compared with yet or a clock that stepped, and logs it by that name.
_scheduled: tuple[logging.Logger, str] | None = None

#: When ``database_now`` may next compare each database by itself (time.monotonic()).
_compare_due: dict[str, float] = {}

#: When ``database_now`` may next compare each database again because a clock stepped
#: since the latest comparison (time.monotonic()): once in RETRY_UNANSWERED at most.
_step_compare_due: dict[str, float] = {}

#: Seconds before a comparison ``database_now`` made, and the database did not answer,
#: is tried again: soon, as the caller's own statement is about to find the database
#: back or fail; not at each call, so an outage does not double the failed queries.
RETRY_UNANSWERED = 1.0

#: Seconds a caller of ``database_now`` waits for the comparison it started: a server
#: answers a connection and a query in milliseconds; one slower than this is left to
#: finish, and the caller goes on by its host's time meanwhile.
COMPARE_WAIT = 1.0

_logger = logging.getLogger("djqueue")


def compare_clocks(logger: logging.Logger, process: str,
                   databases: list[str] | None = None) -> dict[str, float]:
    """Compare this host's clock with each database server's (of ``databases``, all by
    default; SQLite is on this host); log a WARNING for each that is more than WARN_PAST
    seconds (and half the read's round trip) apart, and one INFO line for each the
    latest comparison before found so and that is back within it. Returns the offsets
    read, by database. A database that does not answer is passed over: the process's
    own start says so, or its heartbeat later."""
    offsets = {}
    for db in placement.databases() if databases is None else databases:
        if vendor_of(db) == "sqlite":
            continue
        try:
            offset, round_trip, base = read_clock(db)
        except DatabaseError:
            continue
        before = _latest.get(db)
        latest = _latest[db] = Comparison(offset, time.monotonic(), base,
                                          WARN_PAST + round_trip / 2)
        offsets[db] = offset
        if latest.far:
            logger.warning(
                "%s: this host's clock is %.1f s %s database %s's. djqueue stamps and "
                "judges leases, delays and retry times by the database's clock, but this "
                "host's logs and its other software read its own: set this host's clock "
                "(NTP, chrony).", process, abs(offset),
                "ahead of" if offset > 0 else "behind", db,
                extra={"database": db, "clock_offset": offset})
        elif before is not None and before.far:
            logger.info("%s: this host's clock is back within %.1f s of database %s's",
                        process, WARN_PAST, db, extra={"database": db, "clock_offset": offset})
    return offsets


def database_now(db: str) -> datetime:
    """Now, by database ``db``'s clock: what a lease's end, a delay, a retry's time, an
    expiry and a heartbeat are stamped and judged by, so that a host whose clock is far
    neither returns claims still being worked on, nor counts a live worker dead, nor
    runs delays off time. Returned as ``timezone.now()`` returns it.

    The database's time is carried from the latest comparison on a steady clock (the
    comparison's reading plus the time passed since): the read costs no round trip.
    The steady clock drifts from the database's by NTP's few parts a million, some
    milliseconds between comparisons.

    When this host's time of day has moved more than WARN_PAST from the carried time
    since the comparison, a clock stepped: this host's alone (set apart, or set right
    again), or this host's and the database's at once (NTP setting a fleet, a database
    on this host). The carried time is right in the first case and off by the step in
    the second, and only a read tells them apart: so the database is compared again at
    once (as a web process compares, below; once a RETRY_UNANSWERED at most), and its
    times follow what that finds. Carried until it answers.

    Why the host's own time whenever the two are within the comparison's margin (the
    one it is warned by: WARN_PAST and half the read's round trip): a near host's offset
    is NTP's milliseconds plus the comparison's own noise, and moving its times by that
    would change nothing but make them jitter. A read slowed by a busy server, its round
    trip seconds long, would otherwise move every time by up to half of it unwarned.

    A process that runs no ``ClockChecks`` (a web process) compares here, on a
    connection of its own, as it first needs database ``db``'s time and again once
    CLOCK_CHECK_INTERVAL has passed; one that runs them, only for a database they have
    not compared yet. Either compares here after a step (above)."""
    if vendor_of(db) == "sqlite":  # a file on this host: its time is this host's
        return datetime.fromtimestamp(time.time(), tz=_zone())
    latest = _latest.get(db)
    if latest is None or not _scheduled:
        latest = _compared_when_due(db)
    now = time.time()
    if latest is not None:
        carried = time.clock_gettime(STEADY) + latest.base
        if abs(now - carried - latest.offset) > WARN_PAST:  # a clock stepped since
            latest = _compared_when_due(db, _step_compare_due) or latest
            now, carried = time.time(), time.clock_gettime(STEADY) + latest.base
        if abs(now - carried) > latest.margin:
            now = carried
    return datetime.fromtimestamp(now, tz=_zone())


@cache
def _zone() -> tzinfo | None:
    """The time zone of ``database_now``'s times: ``timezone.now()``'s (UTC, or none
    without USE_TZ), read once rather than through the settings object at each call."""
    return UTC if settings.USE_TZ else None


@receiver(setting_changed)
def _forget_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "USE_TZ":
        _zone.cache_clear()
    elif setting == "DATABASES":
        _compare_due.clear()
        _step_compare_due.clear()


def _compared_when_due(db: str, due: dict[str, float] | None = None) -> Comparison | None:
    """The latest comparison with database ``db``, made first if one is due by ``due``
    (``_compare_due`` by default), on a thread of its own: so on a connection of its
    own, neither in the caller's transaction nor among its queries (a test counting
    them). The caller waits up to COMPARE_WAIT for it; past that it goes on without."""
    due = _compare_due if due is None else due
    at = time.monotonic()
    if at >= due.get(db, -math.inf):
        due[db] = at + RETRY_UNANSWERED  # first, so other threads wait for it
        comparing = threading.Thread(target=_compare_apart, args=(db, at), daemon=True,
                                     name="djqueue-clock-comparison")
        comparing.start()
        comparing.join(COMPARE_WAIT)
    return _latest.get(db)


def _compare_apart(db: str, at: float) -> None:
    try:
        logger, process = _scheduled or (_logger, f"Process {os.getpid()}")
        if compare_clocks(logger, process, [db]):
            _compare_due[db] = at + get_settings().CLOCK_CHECK_INTERVAL
    finally:
        connections.close_all()  # this thread's


def _now_scheduled(logger: logging.Logger, process: str) -> None:
    """A ClockChecks compares on its schedule from now on, so ``database_now`` leaves to it
    the databases compared already. Set as one is first run, not made: a process that
    makes one and never runs it (the supervisor, the metrics server) compares by itself."""
    global _scheduled
    _scheduled = logger, process


def latest_offset(db: str) -> float | None:
    """This host's clock minus database ``db``'s at this process's latest comparison,
    in seconds; None before the first (and always on SQLite)."""
    latest = _latest.get(db)
    return None if latest is None else latest.offset


class ClockChecks:
    """The comparison repeated for a long-running process: ``check()`` now, and
    ``check_when_due()`` from its heartbeat or its pass, which compares again once
    CLOCK_CHECK_INTERVAL seconds have passed since the last. While a database stays far
    it is warned of at each check; when it comes back, one INFO line says so
    (``compare_clocks``). It starts from the process's comparisons so far, if any
    (``djqueue_http`` compares as it starts, its long polls' checks later): the first
    is due an interval after the latest of them."""

    def __init__(self, logger: logging.Logger, process: str) -> None:
        self.logger, self.process = logger, process
        self._due = max((c.at for c in _latest.values()), default=-math.inf)
        self._due += get_settings().CLOCK_CHECK_INTERVAL

    @property
    def due(self) -> bool:
        """Whether CLOCK_CHECK_INTERVAL has passed since the last comparison (read
        without a database, so a caller on an event loop can ask before it hops to a
        database thread)."""
        return time.monotonic() >= self._due

    def check_when_due(self) -> None:
        _now_scheduled(self.logger, self.process)
        if self.due:
            self.check()

    def check(self) -> None:
        _now_scheduled(self.logger, self.process)
        self._due = time.monotonic() + get_settings().CLOCK_CHECK_INTERVAL
        compare_clocks(self.logger, self.process)
