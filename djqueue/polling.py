"""Waiting for work without hammering the database.

Receivers poll with a delay that doubles from POLL_MIN to POLL_MAX while they
find nothing. A send committed in the same process wakes them at once.
"""

from __future__ import annotations

import threading
import time

from djqueue.conf import get_settings


class LocalWakeup:
    """A process-wide generation counter that senders bump on commit."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        self._waiting = 0

    @property
    def generation(self) -> int:
        return self._generation

    def notify(self) -> None:
        # No lock unless someone waits: a waiter counts itself in before it tests the
        # generation, so it either sees this bump or is counted and woken.
        self._generation += 1
        if self._waiting:
            with self._cond:
                self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Sleep up to ``timeout`` unless a notify came after generation ``seen``."""
        with self._cond:
            self._waiting += 1
            try:
                return self._cond.wait_for(lambda: self._generation != seen, timeout)
            finally:
                self._waiting -= 1


local_wakeup = LocalWakeup()


class Backoff:
    """The adaptive idle delay of one polling loop."""

    def __init__(self) -> None:
        settings = get_settings()
        self.minimum, self.maximum = settings.POLL_MIN, settings.POLL_MAX
        self.delay = self.minimum
        self.seen = local_wakeup.generation

    def reset(self) -> None:
        self.delay = self.minimum

    def answered(self) -> None:
        """The wake-ups so far are answered by the pass starting now: a worker's pass
        collects the finished results that woke it, and a claim sees every send
        committed before it. Without this, a result that came in while the loop was
        busy made the next sleep return at once, for a claim that found nothing."""
        self.seen = local_wakeup.generation

    def sleep(self, deadline: float | None = None) -> bool:
        """Wait the current delay (capped at ``deadline``) or until woken, then adapt.
        Whether it was woken (a send committed, a handler finished)."""
        timeout = self.delay
        if deadline is not None:
            timeout = max(0.0, min(timeout, deadline - time.monotonic()))
        woken = local_wakeup.wait(self.seen, timeout)
        self.seen = local_wakeup.generation
        if woken:
            self.reset()
        else:
            self.delay = min(self.delay * 2, self.maximum)
        return woken
