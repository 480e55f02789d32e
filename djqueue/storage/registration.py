"""A worker's presence: its row in ``djqueue_worker``, its session lock, its heartbeat.

The reaper declares a worker dead when its process is gone, its session lock has
stayed free for two heartbeat intervals, or its heartbeat stopped
(djqueue.maintenance.dead_workers); then it returns the worker's claims.

A process serving queues on several databases (djqueue.storage.placement) is
present on each: a row and a session lock on every one, so each database's
reaper judges the claims made there by what that database shows.

Each beat also writes how far the process's host clock was from that database's at
its latest comparison (djqueue.storage.host_clock), so the metrics show a fleet's
clocks in one place.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence

from django.db import DatabaseError, connections

from djqueue.exceptions import DjqueueError
from djqueue.models import ProcessKind
from djqueue.models import Worker as WorkerRecord
from djqueue.storage import dialects, host_clock
from djqueue.storage.failure_streaks import FailureStreaks
from djqueue.storage.session_locks import SessionLock

logger = logging.getLogger("djqueue.worker")
#: How many held message ids a heartbeat reports (the dashboard shows them).
HELD_IDS_SHOWN = 10


@functools.cache
def pid_namespace() -> str:
    """This host's boot id and this process's pid namespace, where the OS tells them
    (Linux), else "". A hostname alone does not say where a pid names a process:
    containers run with the host's network share its hostname but not its pids, and
    machines made from one image may share one name. The reaper looks a worker's pid up
    only where this matches its own (djqueue.maintenance.dead_workers)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot_id:
            boot = boot_id.read().strip()
        return f"{boot} {os.readlink('/proc/self/ns/pid')}"[:80]
    except OSError:
        return ""


class Registration:
    def __init__(self, worker_id: str, lock_key: str, *, queues: list[str], concurrency: int,
                 held: Callable[[], list[int]], wake_address: str = "",
                 databases: Sequence[str] | None = None,
                 kind: ProcessKind = ProcessKind.WORKER) -> None:
        self.worker_id = worker_id
        self.kind = kind
        #: The databases it is present on (default: the current one).
        self.databases = tuple(databases or (dialects.alias(),))
        self.wake_address = wake_address
        self.lock_key = lock_key
        self.queues = queues
        self.concurrency = concurrency
        self._held = held
        self._locks = {db: SessionLock(lock_key, db) for db in self.databases}
        #: The databases where another session held the lock at the last try.
        self._lock_elsewhere: set[str] = set()
        #: Set by deregister, before the row goes: a heartbeat that then finds no row
        #: must not register the stopping worker again.
        self._leaving = threading.Event()
        #: Held while leaving and while registering again, so neither runs inside the other.
        self._registration = threading.Lock()
        #: Each database's failed heartbeats, logged as a streak (the heartbeat thread's).
        self._beat_failures = FailureStreaks(logger, "Heartbeat on {}",
                                             {"worker": worker_id}, "database")

    def register(self, *, retried_by_heartbeat: bool = False) -> None:
        """Register on every database; one that does not answer is registered by a later
        heartbeat (:meth:`beat` writes a missing row). If none answers, this raises (a
        worker cannot start), unless ``retried_by_heartbeat``: an HTTP API server or a
        blocking receive serves at once, its receivers finding messages by their poll
        until a heartbeat has registered it and senders' wake-ups reach it."""
        failed: list[Exception] = []
        for db in self.databases:
            try:
                self._register(db)
            except (DatabaseError, DjqueueError) as exc:  # DjqueueError: its lock is held
                if len(self.databases) == 1 and not retried_by_heartbeat:
                    raise
                logger.error("Could not register %s on %s; a heartbeat will try again: %s",
                             self.worker_id, db, exc, extra={"worker": self.worker_id})
                failed.append(exc)
        if len(failed) == len(self.databases) and not retried_by_heartbeat:
            raise failed[0]

    def _register(self, db: str) -> None:
        if not self._locks[db].acquire():
            raise DjqueueError(f"Session lock {self.lock_key} is already held on {db!r}.")
        WorkerRecord.objects.using(db).update_or_create(
            pk=self.worker_id, defaults={
                "hostname": socket.gethostname()[:255], "pid": os.getpid(),
                "pid_namespace": pid_namespace(),
                "lock_key": self.lock_key, "queues": self.queues,
                "concurrency": self.concurrency, "heartbeat_at": host_clock.database_now(db),
                "wake_address": self.wake_address, "kind": self.kind,
                "clock_offset": host_clock.latest_offset(db)})

    def add_database(self, db: str) -> None:
        """Be present on ``db`` too, from now on (a partition added at run time)."""
        if db in self.databases:
            return
        with self._registration:
            if self._leaving.is_set() or db in self.databases:
                return
            self._locks[db] = SessionLock(self.lock_key, db)
            try:
                self._register(db)
            except Exception:  # DatabaseError, or its lock still held: the next claim tries
                logger.exception("Could not register on %s; the next claim tries again", db,
                                 extra={"worker": self.worker_id})
                self._locks.pop(db).close()
                return
            self.databases = (*self.databases, db)

    def deregister(self) -> None:
        with self._registration:
            self._leaving.set()
            for db in self.databases:
                try:
                    WorkerRecord.objects.using(db).filter(pk=self.worker_id).delete()
                except DatabaseError:
                    logger.exception("Could not delete the worker row on %s", db,
                                     extra={"worker": self.worker_id})
        for lock in self._locks.values():
            lock.close()

    def beat(self) -> None:
        """One heartbeat: keep the lock and the row alive, report what is held; a row the
        reaper deleted (a long pause), or one never written (an HTTP API server whose
        registration failed), is registered, unless the process is leaving."""
        holding = self._holding()
        for db in self.databases:  # each on its own: one server down stops no other beat
            if self._leaving.is_set():
                return
            self._beat(db, holding)

    def _beat(self, db: str, holding: dict[str, object]) -> None:
        try:
            lock = self._locks[db]
            if not lock.is_alive():
                # If another session has it (the old one, which the server has not yet
                # seen die), the beat goes on (the row says this process lives), and
                # every beat tries again; said once.
                if lock.acquire():
                    self._lock_elsewhere.discard(db)
                elif db not in self._lock_elsewhere:
                    self._lock_elsewhere.add(db)
                    logger.warning("Session lock %s is held by another session on %s; "
                                   "each heartbeat tries again", self.lock_key, db,
                                   extra={"worker": self.worker_id})
            beat = WorkerRecord.objects.using(db).filter(pk=self.worker_id).update(
                heartbeat_at=host_clock.database_now(db), clock_offset=host_clock.latest_offset(db),
                **holding)
            if not beat:
                with self._registration:
                    if self._leaving.is_set():
                        return
                    logger.warning("Worker row missing on %s (reaped, or its registration "
                                   "failed); registering again", db,
                                   extra={"worker": self.worker_id})
                    self._register(db)
        except (DatabaseError, DjqueueError, MemoryError) as exc:  # DjqueueError: lock elsewhere
            self._beat_failures[db].failed(exc, "the next beat tries again")
            with contextlib.suppress(DatabaseError):
                connections[db].close()
        else:
            self._beat_failures[db].succeeded()

    def set_queues(self, queues: list[str]) -> None:
        """Serve (and be woken for) ``queues`` from now on (an HTTP API server's waits).
        Under the registration's lock: a heartbeat writing the row again at the same
        moment writes either list, then this one, never this one then the old."""
        with self._registration:
            self.queues = queues
            for db in self.databases:
                WorkerRecord.objects.using(db).filter(pk=self.worker_id).update(queues=queues)

    def _holding(self) -> dict[str, object]:
        try:
            held = sorted(self._held())
        except RuntimeError:  # the dict changed while being copied; the next beat will tell
            return {}
        return {"holding": len(held), "held_ids": held[:HELD_IDS_SHOWN]}
