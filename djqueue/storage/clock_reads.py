"""One read of a database server's clock against this host's (for ``host_clock``).

Kept apart from the comparisons made of it: a read is the part where the clocks of
this host can move under it (a step of the time of day during the query), and the
part tests move them in.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from django.db import connections

from djqueue.storage.statements.vendor_sql import clock_sql

#: The clock the database's time is carried on between comparisons: one no one sets, so
#: a step of the time of day (a hand, NTP correcting a far clock) does not move it. The
#: boot clock counts a suspended host's sleep; the monotonic clock, where it is missing,
#: does not.
STEADY = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)

#: Seconds by which the time of day may move unlike the steady clock during one read
#: before the read is taken for one a step of the clock fell into, and set aside.
STEP_DURING_READ = 0.05

#: Reads a comparison makes, the quickest kept: three queries of a few hundred
#: microseconds each, at a process's start, once in CLOCK_CHECK_INTERVAL, and after a
#: step of a clock.
READS = 3


class Reading(NamedTuple):
    """One read of a database's clock."""

    offset: float  #: this host's clock minus the database's, in seconds
    round_trip: float  #: seconds the read took
    base: float  #: the database's clock minus the steady clock


def read_clock(db: str) -> Reading:
    """Database ``db``'s clock read against this host's, its reading set against the
    middle of the round trip: the quickest of READS reads.

    Why the quickest (as NTP keeps its quickest exchange): the server read its clock
    somewhere within the round trip, so half of it is the reading's uncertainty. One
    read a busy server slowed to seconds would carry that into every time a far host
    stamps, and widen the margin a near one is judged by; the quickest of a few is
    rarely slowed.

    A read a step of this host's clock falls into (a hand, NTP) would give an offset
    between the two, and a database time carried from it would be off by that much: a
    heartbeat stamped by it would read as tens of seconds old, and its worker as dead.
    So the time of day is read with the steady clock around the query, and a read in
    which the two moved apart is set aside (the last is kept if every one was). The
    database's time carried between comparisons (``Reading.base``) is read against
    the steady clock alone."""
    connection = connections[db]
    kept: list[Reading] = []
    with connection.cursor() as cursor:
        for _ in range(READS):
            steady_before, before = time.clock_gettime(STEADY), time.time()
            cursor.execute(f"SELECT {clock_sql(connection.vendor)}")
            after, steady_after = time.time(), time.clock_gettime(STEADY)
            database_now = float(cursor.fetchone()[0])
            reading = Reading((before + after) / 2 - database_now, after - before,
                              database_now - (steady_before + steady_after) / 2)
            if abs((after - before) - (steady_after - steady_before)) <= STEP_DURING_READ:
                kept.append(reading)
    return min(kept, key=lambda kept_reading: kept_reading.round_trip, default=reading)
