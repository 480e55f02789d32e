"""When a worker next claims on each database its queues live on.

A worker's loop keeps one idle backoff (djqueue.polling.Backoff): when to wake at
all, for a finished handler, a send in this process or the next poll. Once awake,
which databases it claims on is decided here, by two rules.

**A failed claim leaves its database alone** (and so does a failed settlement of
finished messages, djqueue.worker.ack_batches) for a pause that doubles from
:data:`FIRST_PAUSE` to :data:`LONGEST_PAUSE` while its claims keep failing (its server
is down, a failover is under way), and ends with its next claim that answers. Its
finished messages wait, unacked, for its return; the worker's other databases go
on. This holds for a worker on one database too.

**Several databases each keep their own backoff**, by the loop's rule: a claim there
that finds messages or carries acks keeps its next claim immediate; one that finds
nothing puts it off for a delay that doubles from ``POLL_MIN`` to ``POLL_MAX``. A
wake-up naming a database (a send's datagram, djqueue.api.worker_wakeups) makes it
due at once; one naming none, or a database this worker does not claim on, makes
them all due. A database with acks to settle is claimed on whenever the loop claims.
Why: their traffic differs (a send to a partitioned queue lands on one partition; a
queue placed on another database may sit idle while the home one drains). Without a
pace of their own, every send woke every worker serving the queue into a claim on
every database: four workers on a queue of three partitions made twelve claims on
three servers for one message. A worker on one database claims whenever its loop does.

Both are "when may this database be claimed on next", so one class keeps both: the
loop asks it once a round (:meth:`DatabasePacing.due`) and tells it what each claim
did (:meth:`~DatabasePacing.claimed`, :meth:`~DatabasePacing.failed`); the settlement of
finished messages tells it too (:meth:`~DatabasePacing.answered`, ``failed``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection

from djqueue.conf import get_settings

#: Seconds a database whose claim failed is left alone: the first pause, and the longest.
FIRST_PAUSE, LONGEST_PAUSE = 0.5, 5.0


class DatabasePacing:
    def __init__(self) -> None:
        settings = get_settings()
        self.shortest, self.longest = settings.POLL_MIN, settings.POLL_MAX
        self._lock = threading.Lock()  # the wake socket's thread names, the loop takes
        self._named: set[str] = set()
        self._all_named = False
        #: database -> (monotonic time of its next claim, the delay after that one);
        #: only while the worker claims on several databases.
        self._next: dict[str, tuple[float, float]] = {}
        #: database -> (monotonic time its failure pause ends, that pause)
        self._failing: dict[str, tuple[float, float]] = {}

    def woken(self, database: str | None) -> None:
        """A wake-up arrived naming ``database`` (None: naming none)."""
        with self._lock:
            if database is None:
                self._all_named = True
            else:
                self._named.add(database)

    def due(self, databases: Collection[str], acking: Collection[str] = ()) -> list[str]:
        """Which of ``databases`` to claim on now (``acking``: those with finished
        messages to settle); takes the wake-ups so far."""
        with self._lock:
            named, self._named = self._named, set()
            all_named, self._all_named = self._all_named, False
        now = time.monotonic()
        answering = [db for db in databases if self._answering(db, now)]
        if len(databases) <= 1:
            if self._next:
                self._next.clear()  # one database: the loop's own backoff paces it
            return answering
        served = set(databases)
        if self._next.keys() - served:  # a partition no longer served
            self._next = {db: at for db, at in self._next.items() if db in served}
        if all_named or not named <= served:
            return answering
        return [db for db in answering
                if db in named or db in acking or self._next.get(db, (0.0, 0.0))[0] <= now]

    def claimed(self, database: str, *, several: bool, asked: int, found: int,
                acked: bool) -> None:
        """Record a claim on ``database`` that answered (``several``: one of the
        worker's several databases), having asked for ``asked``."""
        self.answered(database)
        if not several:
            return
        if found or acked:
            self._next[database] = (0.0, self.shortest)
        elif asked:  # asked and found nothing: put off, the delay doubling
            delay = self._next.get(database, (0.0, self.shortest))[1]
            self._next[database] = (time.monotonic() + delay, min(delay * 2, self.longest))
        # else: asked for none (earlier databases filled the batch), so it stays due

    def answered(self, database: str) -> None:
        """Record a claim or a settlement on ``database`` that answered: its series of
        failures ends, so the next failure pauses it for :data:`FIRST_PAUSE` again."""
        self._failing.pop(database, None)

    def _answering(self, database: str, now: float) -> bool:
        """Whether ``database`` is out of its failure pause at ``now``: claims and
        settlements may go to it."""
        until = self._failing.get(database)
        return until is None or until[0] <= now

    def left_alone(self) -> frozenset[str]:
        """The databases in a failure pause now (none, as a rule: one dict read)."""
        if not self._failing:
            return frozenset()
        now = time.monotonic()
        return frozenset(db for db in self._failing if not self._answering(db, now))

    def failed(self, database: str) -> float:
        """Record a claim or a settlement on ``database`` that failed; returns the
        seconds it is left alone."""
        pause = min(self._failing.get(database, (0.0, FIRST_PAUSE / 2))[1] * 2, LONGEST_PAUSE)
        self._failing[database] = (time.monotonic() + pause, pause)
        return pause

    def next_due(self) -> float | None:
        """When the soonest put-off database is next due (monotonic); None when none is
        put off. Those already due are claimed on by the loop's next claim; a failure
        pause is not waited for (the loop's own backoff polls past it)."""
        now = time.monotonic()
        return min((at for at, _ in self._next.values() if at > now), default=None)
