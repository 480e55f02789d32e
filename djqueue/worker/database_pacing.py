"""When a worker whose queues live on several databases next claims on each of them.

A worker's loop keeps one idle backoff (djqueue.polling.Backoff), but its databases'
traffic differs: a send to a partitioned queue lands on one partition, and a queue
placed on another database may sit idle while the home one drains. Without a pace
of their own, every send woke every worker serving the queue into a claim on every
database: four workers on a queue of three partitions made twelve claims on three
servers for one message, and each claim that found it reset every database's
backoff to its shortest poll.

So each database keeps its own backoff, by the loop's rule: a claim there that
finds messages or carries acks keeps its next claim immediate; one that finds
nothing puts it off for a delay that doubles from ``POLL_MIN`` to ``POLL_MAX``. A
wake-up naming a database (a send's datagram, djqueue.api.worker_wakeups) makes it
due at once; one naming none, or a database this worker does not claim on, makes
them all due, as a wake-up did before. A worker on one database claims as its
loop decides, as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection

from djqueue.conf import get_settings


class DatabasePacing:
    def __init__(self) -> None:
        settings = get_settings()
        self.shortest, self.longest = settings.POLL_MIN, settings.POLL_MAX
        self._lock = threading.Lock()  # the wake socket's thread names, the loop takes
        self._named: set[str] = set()
        self._all_named = False
        #: database -> (monotonic time of its next claim, the delay after that one)
        self._next: dict[str, tuple[float, float]] = {}

    def woken(self, database: str | None) -> None:
        """A wake-up arrived naming ``database`` (None: naming none)."""
        with self._lock:
            if database is None:
                self._all_named = True
            else:
                self._named.add(database)

    def due(self, databases: Collection[str]) -> Collection[str]:
        """Which of ``databases`` to claim on now; takes the wake-ups so far."""
        with self._lock:
            named, self._named = self._named, set()
            all_named, self._all_named = self._all_named, False
        if len(databases) <= 1:
            if self._next:
                self._next.clear()  # one database: the loop's own backoff paces it
            return databases
        served = set(databases)
        if self._next.keys() - served:  # a partition no longer served
            self._next = {db: at for db, at in self._next.items() if db in served}
        if all_named or not named <= served:
            return databases
        now = time.monotonic()
        return [db for db in databases
                if db in named or self._next.get(db, (0.0, 0.0))[0] <= now]

    def claimed(self, database: str, *, asked: int, found: int, acked: bool) -> None:
        """Record a claim on ``database``, one of several, that asked for ``asked``."""
        if found or acked:
            self._next[database] = (0.0, self.shortest)
        elif asked:  # asked and found nothing: put off, the delay doubling
            delay = self._next.get(database, (0.0, self.shortest))[1]
            self._next[database] = (time.monotonic() + delay, min(delay * 2, self.longest))
        # else: asked for none (earlier databases filled the batch), so it stays due

    def next_due(self) -> float | None:
        """When the soonest put-off database is next due (monotonic); None when none is
        put off. Those already due are claimed on by the loop's next claim."""
        now = time.monotonic()
        return min((at for at, _ in self._next.values() if at > now), default=None)
