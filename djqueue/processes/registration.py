"""A worker's presence: its row in ``djqueue_worker``, its session lock, its heartbeat.

The reaper declares a worker dead when its session lock is free, its process is
gone, or its heartbeat stopped; then it returns the worker's claims.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable

from django.db import DatabaseError, connections
from django.utils import timezone

from djqueue.exceptions import DjqueueError
from djqueue.models import Worker as WorkerRecord
from djqueue.storage import dialects
from djqueue.storage.session_locks import SessionLock

logger = logging.getLogger("djqueue.worker")
#: How many held message ids a heartbeat reports (the dashboard shows them).
HELD_IDS_SHOWN = 10


class Registration:
    def __init__(self, worker_id: str, lock_key: str, *, queues: list[str], concurrency: int,
                 held: Callable[[], list[int]], wake_address: str = "") -> None:
        self.worker_id = worker_id
        self.wake_address = wake_address
        self.lock_key = lock_key
        self.queues = queues
        self.concurrency = concurrency
        self._held = held
        self._lock = SessionLock(lock_key)
        #: Set by deregister, before the row goes: a heartbeat that then finds no row
        #: must not register the stopping worker again.
        self._leaving = threading.Event()
        #: Held while leaving and while registering again, so neither runs inside the other.
        self._registration = threading.Lock()

    def register(self) -> None:
        if not self._lock.acquire():
            raise DjqueueError(f"Session lock {self.lock_key} is already held.")
        WorkerRecord.objects.using(dialects.alias()).update_or_create(
            pk=self.worker_id, defaults={
                "hostname": socket.gethostname()[:255], "pid": os.getpid(),
                "lock_key": self.lock_key, "queues": self.queues,
                "concurrency": self.concurrency, "heartbeat_at": timezone.now(),
                "wake_address": self.wake_address})

    def deregister(self) -> None:
        with self._registration:
            self._leaving.set()
            try:
                WorkerRecord.objects.using(dialects.alias()).filter(pk=self.worker_id).delete()
            except DatabaseError:
                logger.exception("Could not delete the worker row",
                                 extra={"worker": self.worker_id})
        self._lock.close()

    def beat(self) -> None:
        """One heartbeat: keep the lock and the row alive, report what is held; a row the
        reaper deleted (a long pause) is registered again, unless the worker is leaving."""
        if self._leaving.is_set():
            return
        try:
            if not self._lock.is_alive():
                self._lock.acquire()
            beat = WorkerRecord.objects.using(dialects.alias()).filter(pk=self.worker_id).update(
                heartbeat_at=timezone.now(), **self._holding())
            if not beat:
                with self._registration:
                    if self._leaving.is_set():
                        return
                    logger.warning("Worker row was reaped; registering again",
                                   extra={"worker": self.worker_id})
                    self.register()
        except (DatabaseError, MemoryError):
            logger.exception("Heartbeat failed", extra={"worker": self.worker_id})
            with contextlib.suppress(DatabaseError):
                connections[dialects.alias()].close()

    def set_queues(self, queues: list[str]) -> None:
        """Serve (and be woken for) ``queues`` from now on (an HTTP API server's waits)."""
        self.queues = queues
        WorkerRecord.objects.using(dialects.alias()).filter(pk=self.worker_id).update(
            queues=queues)

    def _holding(self) -> dict[str, object]:
        try:
            held = sorted(self._held())
        except RuntimeError:  # the dict changed while being copied; the next beat will tell
            return {}
        return {"holding": len(held), "held_ids": held[:HELD_IDS_SHOWN]}
