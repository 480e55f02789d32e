"""Long polls: receives that wait for a message on the event loop, not on a thread.

A waiting receive joins a line in this process and awaits an event; it holds no
thread and no database connection. A line is the waiters whose claims would take the
same messages: the same queue(s) and the same condition (``where``). Only the first
in each line claims, when something may have arrived:

- a sender's wake-up: the process registers a row in ``djqueue_worker`` (as a
  worker does, with a session lock and a heartbeat) naming the queues it has
  waiters on, and binds a UDP socket on ``WAKE_HOST``; a send that commits sends it
  a datagram naming the queues (djqueue.api.worker_wakeups), which wakes the lines
  waiting on them, so a message is claimed one round trip after its commit;
- every ``POLL_MAX`` seconds, for messages no datagram announced (another host, a
  delay that ran out, a sender with ``WAKE_HOST = None``): one read finds which of the
  lines' queues have a message (djqueue.api.receiving.queues_to_claim_from), and only
  their lines claim, so an idle server costs a few statements a poll, not a claim a line.

A waiter that claimed as many as it asked for hands the turn on at once (more
may be there); one that claimed fewer leaves the rest of the line asleep: what
it could not find, they could not either. So a thousand waiters on a queue cost one
claim per wake-up, not a thousand. (Waiters with different conditions stand in
different lines: one whose condition matched nothing must not keep asleep another
that would have taken the message.)

Two hazards of waking several lines at once, each closed here. A claim locks the rows
it reads (``FOR UPDATE SKIP LOCKED``; under a per-key rate, candidates it then leaves:
djqueue.storage.key_rate_claims), so a line claiming beside another on the same queue
could skip the very message it was woken for, and sleep until the next poll: the
woken claims of lines sharing a queue take turns (a lock per queue name). And a
wake-up that came while an arriving receive made its first claim, before it joined
its line, would pass it by: it claims again at once if any came meanwhile.
(Processes other than this one can still lock a row for a moment; the poll every
``POLL_MAX`` seconds finds what such a claim skipped.)

A line with a condition costs a claim on every wake-up, and a claim whose condition
matches nothing reads every ready message of its queue. So one caller's long polls
may wait with at most ``HTTP_MAX_WAIT_CONDITIONS`` different conditions at once, per
server process; another is refused (TooManyConditions, 429). Without the bound, a
caller's quota would not bound what it costs the database: a request waiting 20 s
would hold a line, claiming at each send, for all of that time (docs/http-api.md
has the measurement).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

from djqueue.api.receiving import queues_to_claim_from
from djqueue.api.worker_wakeups import WakeDatagrams
from djqueue.conf import get_settings
from djqueue.http.database_threads import in_database
from djqueue.models import ProcessKind
from djqueue.storage import host_clock, placement
from djqueue.storage.failure_streaks import FailureStreak
from djqueue.storage.registration import Registration

logger = logging.getLogger("djqueue.http")
T = TypeVar("T")
#: Seconds between two writes of the row's queue list, at most.
QUEUES_WRITE_EVERY = 0.2


#: Which waiters share a line: the queues they wait on, and their condition.
LineKey = tuple[tuple[str, ...], str | None]


class TooManyConditions(Exception):
    """The caller already waits with HTTP_MAX_WAIT_CONDITIONS other conditions: 429."""


class Waiter:
    def __init__(self) -> None:
        self.turn = asyncio.Event()


class WaitingReceives:
    """The lines of this process's waiting receives, by the queues they wait on and
    their condition."""

    def __init__(self) -> None:
        self.lines: dict[LineKey, deque[Waiter]] = {}
        #: caller -> its waiting receives with a condition, by line.
        self._conditions: dict[str, Counter[LineKey]] = {}
        self._started = False
        self._registration: Registration | None = None
        #: Its receives stamp lease ends by the database's clock: this host's compared
        #: with the databases' from the heartbeat (djqueue_http compares them as it
        #: starts; a server run by another command, at its first claim).
        self._clock_checks = host_clock.ClockChecks(logger, "HTTP API server")
        #: Failed polls, logged as a streak (an outage is a line each 10 s).
        self._poll_failures = FailureStreak(logger, "Reading which queues have messages")
        self._queues_written: tuple[str, ...] = ()
        self._queues_dirty = asyncio.Event()
        #: Wake-ups so far (datagrams and polls): an arriving receive reads it around
        #: its first claim.
        self._wake_ups = 0
        #: queue name -> the lock woken claims on it take turns with.
        self._claiming: dict[str, asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jobs: list[asyncio.Task[None]] = []

    # Waiting

    async def receive(self, line: LineKey, wait: float,
                      claim: Callable[[], Awaitable[list[T]]], wanted: int, *,
                      caller: str) -> list[T]:
        """``claim()`` at once, then as woken in ``line``, until it returns messages or
        ``wait`` seconds have passed."""
        if wait <= 0 or line[1] is None:
            return await self._receive(line, wait, claim, wanted)
        with self._condition_of(caller, line):
            return await self._receive(line, wait, claim, wanted)

    @contextlib.contextmanager
    def _condition_of(self, caller: str, line: LineKey) -> Iterator[None]:
        """Count ``caller``'s waiting receive with ``line``'s condition while inside;
        TooManyConditions if that is one condition more than it may wait with."""
        held = self._conditions.setdefault(caller, Counter())
        most = get_settings().HTTP_MAX_WAIT_CONDITIONS
        if line not in held and len(held) >= most:
            raise TooManyConditions(
                f"{caller} already waits with {len(held)} different conditions on this "
                f"server, the most it may (HTTP_MAX_WAIT_CONDITIONS = {most}); wait with "
                "one of those, or without a condition, or receive without waiting.")
        held[line] += 1
        try:
            yield
        finally:
            held[line] -= 1
            if not held[line]:
                del held[line]
            if not held:
                del self._conditions[caller]

    async def _receive(self, line: LineKey, wait: float,
                       claim: Callable[[], Awaitable[list[T]]], wanted: int) -> list[T]:
        wake_ups = self._wake_ups
        found = await claim()
        if found or wait <= 0:
            return found
        await self._start()
        deadline = time.monotonic() + wait
        async with self._in_line(line) as waiter:
            if self._wake_ups != wake_ups:  # woken while it claimed: claim again
                waiter.turn.set()
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.turn.wait(), remaining)
                if not waiter.turn.is_set():
                    return []
                waiter.turn.clear()
                async with self._turns_on(line[0]):
                    found = await claim()
                if found:
                    if len(found) >= wanted:
                        self.wake(line, skip=waiter)  # there may be more
                    return found

    @contextlib.asynccontextmanager
    async def _in_line(self, key: LineKey) -> AsyncIterator[Waiter]:
        waiter = Waiter()
        line = self.lines.setdefault(key, deque())
        line.append(waiter)
        if len(line) == 1:
            self._queues_dirty.set()
        try:
            yield waiter
        finally:
            line.remove(waiter)
            if waiter.turn.is_set():  # woken but leaving: the turn goes on
                self.wake(key)
            if not line:
                del self.lines[key]
                self._queues_dirty.set()

    def wake(self, key: LineKey, skip: Waiter | None = None) -> None:
        """Give the turn to the first waiter of line ``key`` (but ``skip``)."""
        for waiter in self.lines.get(key, ()):
            if waiter is not skip:
                waiter.turn.set()
                break

    @contextlib.asynccontextmanager
    async def _turns_on(self, queues: tuple[str, ...]) -> AsyncIterator[None]:
        """Inside: the only woken claim on ``queues`` in this process (locks taken in
        name order, so two lines on overlapping queues cannot wait for each other)."""
        async with contextlib.AsyncExitStack() as held:
            for name in sorted(queues):
                await held.enter_async_context(self._claiming.setdefault(name, asyncio.Lock()))
            yield

    def wake_for(self, queues: frozenset[str] | None) -> None:
        """Give the turn to the first waiter of each line a send to one of ``queues``
        concerns (None: of every line)."""
        self._wake_ups += 1
        for key in list(self.lines):
            if queues is None or not queues.isdisjoint(key[0]):
                self.wake(key)

    # What wakes the lines

    async def _start(self) -> None:
        if self._started:
            return
        self._started = True
        self._loop = asyncio.get_running_loop()
        settings = get_settings()
        address = ""
        if settings.WAKE_HOST is not None:
            try:
                transport, _ = await self._loop.create_datagram_endpoint(
                    lambda: WakeDatagrams(self.wake_for), local_addr=(settings.WAKE_HOST, 0),
                    family=socket.AF_INET)
                address = "{}:{}".format(*transport.get_extra_info("sockname")[:2])
            except OSError as exc:  # as a blocking receive does (djqueue.api.receive_wakeups)
                logger.warning("The API server cannot take wake-ups on WAKE_HOST %r (%s): its "
                               "long polls find messages by its poll", settings.WAKE_HOST, exc)
        lock_key = uuid.uuid4().hex
        self._registration = Registration(
            f"http:{socket.gethostname()[:55]}:{os.getpid()}:{lock_key[:8]}", lock_key,
            queues=[], concurrency=0, held=list, wake_address=address, kind=ProcessKind.HTTP,
            databases=placement.databases())
        await in_database(functools.partial(self._registration.register,
                                            retried_by_heartbeat=True))
        # Kept: the loop holds only weak references to its tasks.
        self._jobs = [self._loop.create_task(job())
                      for job in (self._poll, self._beat, self._write_queues)]

    async def _poll(self) -> None:
        """Every POLL_MAX seconds: one read for the queues of the lines without a
        condition, and the turn to those whose queues have a message (and to every line
        with a condition: what it would take, only its claim can tell)."""
        while True:
            await asyncio.sleep(get_settings().POLL_MAX)
            plain = {name for names, where in self.lines if where is None for name in names}
            try:
                ready = await in_database(queues_to_claim_from, plain) if plain else set()
            except Exception as exc:
                self._poll_failures.failed(exc, "every line claims")
                ready = plain
            else:
                self._poll_failures.succeeded()
            self._wake_ups += 1
            for key in list(self.lines):
                if key[1] is not None or not ready.isdisjoint(key[0]):
                    self.wake(key)

    async def _beat(self) -> None:
        assert self._registration is not None
        while True:
            await asyncio.sleep(get_settings().HEARTBEAT_INTERVAL)
            try:  # it logs a database's failure itself; anything else must not end it
                await in_database(self._registration.beat)
                if self._clock_checks.due:  # a database thread only when it compares
                    await in_database(self._clock_checks.check)
            except Exception:
                logger.exception("The API server's heartbeat failed; the next tries again")

    async def _write_queues(self) -> None:
        """Keep the row's queue list (what senders wake this process for) current."""
        assert self._registration is not None
        while True:
            await self._queues_dirty.wait()
            self._queues_dirty.clear()
            names = tuple(sorted({name for queues, _ in self.lines for name in queues}))
            if names != self._queues_written:
                try:
                    await in_database(self._registration.set_queues, list(names))
                    self._queues_written = names
                except Exception:
                    logger.exception("Could not write the API server's queue list")
                    self._queues_dirty.set()
            await asyncio.sleep(QUEUES_WRITE_EVERY)


#: One per event loop (an ASGI server runs one).
_by_loop: dict[int, WaitingReceives] = {}


def waiting_receives() -> WaitingReceives:
    loop = asyncio.get_running_loop()
    found = _by_loop.get(id(loop))
    if found is None:
        found = _by_loop[id(loop)] = WaitingReceives()
    return found
