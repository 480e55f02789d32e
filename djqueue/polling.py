"""Waiting for work, or for a result, without hammering the database.

Receivers poll with a delay that doubles from POLL_MIN to POLL_MAX while they
find nothing. A send committed in the same process wakes them at once. Callers that
wait for a task or a workflow to finish (``poll_until``) poll the same way, up to
their own longest pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

from djqueue import durations
from djqueue.conf import get_settings


class LocalWakeup:
    """A process-wide generation counter that senders bump on commit; threads wait for
    it with :meth:`wait`, coroutines with :meth:`await_change`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0
        self._waiting = 0
        #: The futures of waiting coroutines, with their loops (a bump may come from
        #: any thread: each is resolved on its own loop).
        self._awaiting: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()

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
        if self._awaiting:
            with self._cond:
                awaiting = list(self._awaiting)
            for loop, future in awaiting:
                with contextlib.suppress(RuntimeError):  # its loop has closed
                    loop.call_soon_threadsafe(_resolve, future)

    def wait(self, seen: int, timeout: float) -> bool:
        """Sleep up to ``timeout`` unless a notify came after generation ``seen``."""
        with self._cond:
            self._waiting += 1
            try:
                return self._cond.wait_for(lambda: self._generation != seen, timeout)
            finally:
                self._waiting -= 1

    async def await_change(self, seen: int, timeout: float) -> bool:
        """:meth:`wait` for a coroutine: the pause passes on its event loop."""
        loop = asyncio.get_running_loop()
        entry = (loop, loop.create_future())
        with self._cond:  # counted in before the test, as in wait()
            self._awaiting.add(entry)
        try:
            if self._generation == seen:
                await asyncio.wait({entry[1]}, timeout=timeout)
            return self._generation != seen
        finally:
            with self._cond:
                self._awaiting.discard(entry)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


local_wakeup = LocalWakeup()


def soonest(*deadlines: float | None, seconds: float | None) -> float | None:
    """The earliest of monotonic deadlines and ``seconds`` from now (any may be None): a
    deadline for ``Backoff.sleep`` out of several."""
    times = [at for at in deadlines if at is not None]
    if seconds is not None:
        times.append(time.monotonic() + seconds)
    return min(times, default=None)


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
        return self._adapt(local_wakeup.wait(self.seen, self._timeout(deadline)))

    async def asleep(self, deadline: float | None = None) -> bool:
        """:meth:`sleep` on the running event loop."""
        return self._adapt(await local_wakeup.await_change(self.seen, self._timeout(deadline)))

    def _timeout(self, deadline: float | None) -> float:
        if deadline is None:
            return self.delay
        return max(0.0, min(self.delay, deadline - time.monotonic()))

    def _adapt(self, woken: bool) -> bool:
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
