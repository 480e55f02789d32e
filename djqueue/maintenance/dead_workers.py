"""Which registered workers are dead, for the reaper to return their claims.

A worker (or HTTP API server, or blocking receive) is dead when

- it has not beaten for ``WORKER_TIMEOUT`` seconds (frozen, or its host is gone);
- it ran on the reaper's host, in its pid namespace, and its process is gone (a kill,
  found at the next pass);
- or its session lock has been free at every look for ``LOCK_FREE_FOR`` heartbeat
  intervals. A killed process's lock frees as soon as the server sees its connection
  close. But a live process's lock frees too when only its lock's connection broke
  (the server restarted, a ``KILL``, a proxy): its next heartbeat takes the lock
  again. Judged dead at the first look, such a process would have its claims returned
  while its handlers still ran them, and they would run a second time;
- or its heartbeat time has been unreadable at every look for ``WORKER_TIMEOUT`` (a
  hand edit or another tool wrote a time the driver refuses): a live worker's next
  heartbeat writes one that reads. The other rows are judged all the same.

The looks are timed on the reaper's own monotonic clock, not by the rows'
``heartbeat_at``: a worker host whose clock runs ahead cannot make a kill wait.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from djqueue.conf import get_settings
from djqueue.models import Worker as WorkerRecord
from djqueue.storage import host_clock
from djqueue.storage.registration import pid_namespace
from djqueue.storage.session_locks import session_lock_free
from djqueue.storage.unreadable_rows import read_rows

logger = logging.getLogger("djqueue.reaper")

#: How many heartbeat intervals a lock must stay free: a live process takes its lock
#: again at its next beat, one interval away (two leave room for a slow beat).
LOCK_FREE_FOR = 2.0


#: The columns the judgement reads (not the JSON ones, which it has no use for).
_JUDGED_BY = ("id", "hostname", "pid", "pid_namespace", "lock_key", "heartbeat_at")


def _readable(row: WorkerRecord) -> WorkerRecord | None:
    """The row, or None if its heartbeat could not be read."""
    return row if row.heartbeat_at is not None else None


class DeadWorkerFinder:
    """The reaper's finder of dead workers among its databases' worker rows. It remembers,
    per database and worker, since when the worker's lock has been seen free (or its row
    unreadable), and says once in the log why it took a worker for dead."""

    def __init__(self) -> None:
        self._hostname = socket.gethostname()[:255]
        self._pid_namespace = pid_namespace()
        #: (state, database, worker) -> since when (monotonic) it has been seen in it
        self._since: dict[tuple[str, str, str], float] = {}
        self._said: set[tuple[str, str]] = set()

    def find(self, db: str) -> list[str]:
        """The ids of the dead among ``db``'s worker rows (run with ``db`` the current
        database)."""
        rows = self._read(db)
        seen = {(db, pk) for pk, _ in rows}
        for key in [k for k in self._since if k[1] == db and (db, k[2]) not in seen]:
            del self._since[key]  # the row is gone
        self._said = {k for k in self._said if k[0] != db or k in seen}
        dead = []
        for pk, row in rows:
            try:
                reason = self._why_dead(db, pk, row)
            except (ValueError, OverflowError, TypeError) as exc:
                # A pid beyond pid_t or that is text (SQLite keeps what it is given), a
                # lock key that is not hex (PostgreSQL's key is read from it): no djqueue
                # process writes these (a hand edit, a bug).
                # Such a row is no live process's; raised, it would end every pass.
                reason = f"its row is no process's: {exc}"
            if reason is None:
                continue
            dead.append(pk)
            if (db, pk) not in self._said:  # a row kept for claims still locked: once
                self._said.add((db, pk))
                logger.warning("Worker %s on %s is dead (%s); returning its claims", pk, db,
                               reason, extra={"worker": pk, "database": db})
        return dead

    def _read(self, db: str) -> list[tuple[str, WorkerRecord | None]]:
        """``db``'s worker rows, each with its id; None for a row whose heartbeat cannot
        be read (a hand edit, another tool: djqueue.storage.unreadable_rows)."""
        return [(row.pk, _readable(row)) for row in read_rows(
            WorkerRecord.objects.using(db).only(*_JUDGED_BY))]

    def _why_dead(self, db: str, pk: str, row: WorkerRecord | None) -> str | None:
        settings = get_settings()
        if row is None:  # a live worker's next heartbeat writes a time that reads
            unread_for = self._for(db, pk, "unreadable", True)
            if unread_for >= settings.WORKER_TIMEOUT:
                return f"its heartbeat unreadable for {unread_for:.1f} s"
            return None
        self._for(db, pk, "unreadable", False)
        silent = (host_clock.database_now(db) - row.heartbeat_at).total_seconds()
        if silent > settings.WORKER_TIMEOUT:
            return (f"its last heartbeat {silent:.1f} s ago, past WORKER_TIMEOUT "
                    f"({settings.WORKER_TIMEOUT:g} s)")
        if self._pid_names_it_here(row) and not _pid_alive(row.pid):
            return f"its process {row.pid} is gone"
        # None where there are no session locks (SQLite): never free
        free_for = self._for(db, pk, "lock free", session_lock_free(row.lock_key) is True)
        if free_for >= LOCK_FREE_FOR * settings.HEARTBEAT_INTERVAL:
            return f"its session lock free for {free_for:.1f} s"
        return None

    def _for(self, db: str, pk: str, state: str, now_in_it: bool) -> float:
        """For how long (on the reaper's clock) the worker has been seen in ``state`` at
        every look, this one included; 0 when it is not in it now."""
        key = (state, db, pk)
        if not now_in_it:
            self._since.pop(key, None)
            return 0.0
        return time.monotonic() - self._since.setdefault(key, time.monotonic())

    def _pid_names_it_here(self, row: WorkerRecord) -> bool:
        """Whether the row's pid names its process for the reaper: the same hostname, and
        the same boot and pid namespace (a row of a release before they were recorded
        has none: its hostname alone decides, as it did). A reaper in another container
        with the host's hostname would find a live worker's pid gone."""
        return (row.hostname == self._hostname
                and row.pid_namespace in ("", self._pid_namespace))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
