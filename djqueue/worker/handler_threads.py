"""The worker's handler threads, with a hard time limit per handler run.

Python cannot kill a thread, so a handler that overruns ``time_limit`` is
*abandoned*: the worker records the delivery as failed (it is retried, or
dead-lettered once out of attempts) and a fresh thread takes the stuck one's
place, so the worker keeps its concurrency. Whatever the abandoned thread
returns later is dropped — its lease is void by then, so it could not ack.

Abandoned threads that never return pile up (each holds its stack and whatever
its handler holds); ``stuck`` counts them, and ``exhausted`` is set when no new
thread could be started, so the worker can recycle its process (see Worker).
"""

from __future__ import annotations

import itertools
import queue as stdqueue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from djqueue.storage import fastpath

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _Run(Generic[T]):
    item: T
    started: float
    abandoned: bool = False


class HandlerThreads(Generic[T, R]):
    def __init__(self, execute: Callable[[T], R], deliver: Callable[[R], None], *,
                 size: int, time_limit: float | None = None,
                 accepting: Callable[[], bool] = lambda: True) -> None:
        """``execute(item)`` runs on a pool thread and ``deliver(result)`` receives its
        result there; items taken while ``accepting()`` is false are set aside unrun."""
        self._execute = execute
        self._deliver = deliver
        self._accepting = accepting
        self.size = size
        self.time_limit = time_limit
        self._tasks: stdqueue.SimpleQueue[T | None] = stdqueue.SimpleQueue()
        self._running: dict[int, _Run[T]] = {}
        self._lock = threading.Lock()
        self._names = itertools.count()
        self.set_aside: list[T] = []
        self.abandoned = 0
        #: Abandoned threads still running.
        self.stuck = 0
        #: A replacement thread could not be started (threads or memory ran out).
        self.exhausted = False

    def start(self) -> None:
        for _ in range(self.size):
            self._spawn()

    def submit(self, item: T) -> None:
        self._tasks.put(item)

    def overdue(self) -> list[T]:
        """Items whose run passed the time limit; their threads are replaced."""
        if self.time_limit is None:
            return []
        now = time.monotonic()
        late = []
        with self._lock:
            for run in self._running.values():
                if not run.abandoned and now - run.started > self.time_limit:
                    run.abandoned = True
                    late.append(run.item)
        for _ in late:
            self.abandoned += 1
            with self._lock:
                self.stuck += 1
            self._spawn()
        return late

    def unstarted(self) -> list[T]:
        """Take back everything queued and not yet running."""
        items, self.set_aside = self.set_aside, []
        while True:
            try:
                item = self._tasks.get_nowait()
            except stdqueue.Empty:
                return items
            if item is not None:
                items.append(item)

    def stop(self) -> None:
        """Let the threads end after their current item (abandoned ones end on their own)."""
        for _ in range(self.size):
            self._tasks.put(None)

    def _spawn(self) -> None:
        try:
            threading.Thread(target=self._work, name=f"djqueue-handler-{next(self._names)}",
                             daemon=True).start()
        except (RuntimeError, MemoryError):  # "can't start new thread"
            self.exhausted = True

    def _work(self) -> None:
        # An async handler run here may keep an event loop for this thread; it is
        # closed as the thread ends (djqueue.storage.fastpath.event_loops).
        fastpath.allow_kept_loop()
        try:
            self._take_items()
        finally:
            fastpath.drop_event_loop()

    def _take_items(self) -> None:
        me = threading.get_ident()
        while True:
            item = self._tasks.get()
            if item is None:
                return
            if not self._accepting():
                self.set_aside.append(item)
                continue
            with self._lock:
                self._running[me] = _Run(item, time.monotonic())
            result = self._execute(item)
            with self._lock:
                abandoned = self._running.pop(me).abandoned
                if abandoned:
                    self.stuck -= 1
            if abandoned:
                return  # replaced long ago; the result is void
            self._deliver(result)
