"""Waiting for work, or for a result, without hammering the database.

Receivers poll with a delay that doubles from POLL_MIN to POLL_MAX while they
find nothing. A send committed in the same process wakes them at once. Callers that
wait for a task or a workflow to finish (``poll_until``) poll the same way, up to
their own longest pause.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

from djqueue import durations
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


def poll_until(finished: Callable[[], bool], timeout: float | None, longest: float) -> bool:
    """Call ``finished`` until it returns true: at once, then after pauses doubling from
    POLL_MIN to ``longest`` seconds; the last call falls at ``timeout`` seconds (None:
    no end). Whether it returned true."""
    for pause in _pauses(timeout, longest):
        if finished():
            return True
        time.sleep(pause)
    return finished()


async def apoll_until(finished: Callable[[], Awaitable[bool]], timeout: float | None,
                      longest: float) -> bool:
    """:func:`poll_until` for a coroutine, pausing with ``asyncio.sleep``."""
    for pause in _pauses(timeout, longest):
        if await finished():
            return True
        await asyncio.sleep(pause)
    return await finished()


def _pauses(timeout: float | None, longest: float) -> Iterator[float]:
    """The pauses between the calls of a poll, checked first: ValueError for a timeout
    or a longest pause that is not a number of seconds (a timeout may be 0 or None)."""
    if timeout is not None:
        timeout = durations.check(timeout, "A wait's timeout (or None)",
                                  high=durations.MAX_RETENTION, positive=False)
    # A pause under a millisecond would be a busy loop of reads: the least is 1 ms.
    longest = max(durations.check(longest, "A wait's interval",
                                  high=durations.MAX_PROCESS_WAIT), 0.001)
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = min(get_settings().POLL_MIN, longest)
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            pause = min(pause, left)
        yield pause
        pause = min(pause * 2, longest)
