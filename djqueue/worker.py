"""The worker: claims messages in batches and runs their handlers on a pool of threads.

One loop thread claims (prefetching up to ``batch_size`` beyond the busy
threads), collects results and acks them in batches; a heartbeat thread keeps
the worker row and its session lock alive. Handlers run outside any
transaction unless their queue asks for exactly-once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, close_old_connections, connections

from djqueue import groups, handlers, signals, vendor
from djqueue.claims import PromotionClock, claim_ready
from djqueue.conditions import compile_condition
from djqueue.conf import get_settings
from djqueue.doorbell import Doorbell
from djqueue.exceptions import NotOwner
from djqueue.gil import switch_interval
from djqueue.handler_pool import HandlerPool
from djqueue.handlers import AckHook
from djqueue.interrupts import Interrupts
from djqueue.lifecycle import release, run_and_ack
from djqueue.models import Message
from djqueue.pace import Pace
from djqueue.presence import Presence
from djqueue.queues import get_queue
from djqueue.results import Done, Results, WorkerStats
from djqueue.wakeup import Backoff, wakeup

logger = logging.getLogger("djqueue.worker")
#: Seconds a handler thread's connection may sit idle before it is pinged before use.
IDLE_CHECK = 1.0


@dataclass
class WorkerOptions:
    queues: list[str]
    concurrency: int = 1
    batch_size: int = 10
    max_messages: int | None = None
    max_seconds: float | None = None
    burst: bool = False
    visibility_timeout: float | None = None
    shutdown_grace: float | None = None
    #: A condition (expression or Q) limiting which messages are claimed.
    where: Any = None
    #: Seconds a handler may run before its delivery counts as failed (see HandlerPool).
    time_limit: float | None = None
    #: Abandoned (still running) handler threads past which the worker recycles its
    #: process; default: twice the concurrency, at least 4.
    max_stuck: int | None = None


class Worker:
    def __init__(self, options: WorkerOptions) -> None:
        if options.concurrency < 1 or options.batch_size < 1:
            raise ValueError("concurrency and batch_size must be at least 1.")
        self.options = options
        self.settings = get_settings()
        self.handlers, self.queues = handlers.serving(options.queues)
        self.where = compile_condition(options.where)
        self.lock_key = uuid.uuid4().hex
        self.id = f"{socket.gethostname()[:60]}:{os.getpid()}:{self.lock_key[:8]}"
        self.interrupts = Interrupts()
        self.stats = WorkerStats()
        #: Set when stuck handler threads made the worker stop to be started afresh.
        self.recycle = False
        self.max_stuck = options.max_stuck or max(4, 2 * options.concurrency)
        #: Claimed and not yet settled; only the loop thread touches it.
        self._held: dict[int, Message] = {}
        #: Each handler's in_claim_transaction hook, with the queues it serves.
        self._hooks: dict[AckHook, set[str]] = {}
        for name, entry in self.handlers.items():
            if entry.in_claim_transaction is not None:
                self._hooks.setdefault(entry.in_claim_transaction, set()).add(name)
        self._hook = self._in_claim_transaction if self._hooks else None
        self._results = Results(self.id, self.stats, self._forget, self._hook)
        self._pool: HandlerPool[Message, Done] = HandlerPool(
            self._execute, self._deliver, size=options.concurrency,
            time_limit=options.time_limit, accepting=lambda: not self.interrupts.stop.is_set())
        wake_host = self.settings.WAKE_HOST
        self.doorbell = Doorbell(wake_host) if wake_host is not None else None
        self.presence = Presence(self.id, self.lock_key, queues=options.queues,
                                 concurrency=options.concurrency, held=lambda: list(self._held),
                                 wake_address=self.doorbell.address if self.doorbell else "")
        self._promotion = PromotionClock()
        self._pace = Pace()
        self._thread_state = threading.local()

    # Lifecycle

    def run(self) -> int:
        """Work until stopped or a limit is reached; returns the process exit code."""
        with self.interrupts.installed(), switch_interval(self.settings.WORKER_SWITCH_INTERVAL):
            self.presence.register()
            logger.info("Worker %s started on %s", self.id, ", ".join(self.options.queues),
                        extra={"worker": self.id})
            heartbeat = threading.Thread(
                target=self.presence.beat_until, name="djqueue-heartbeat", daemon=True,
                args=(self.interrupts.stop, self.settings.HEARTBEAT_INTERVAL))
            heartbeat.start()
            if self.doorbell is not None:
                threading.Thread(target=self.doorbell.listen_until, name="djqueue-doorbell",
                                 daemon=True, args=(self.interrupts.stop,)).start()
            self._pool.start()
            signals.worker_started.send(sender=Worker, worker=self)
            try:
                self._loop()
            except Exception:
                logger.exception("Worker loop crashed; shutting down", extra={"worker": self.id})
                raise
            finally:
                self._shutdown()
                self.interrupts.stop.set()
                heartbeat.join(timeout=5)
                if self.doorbell is not None:
                    self.doorbell.close()
                signals.worker_stopped.send(sender=Worker, worker=self)
        return 0

    def stop(self) -> None:
        self.interrupts.stop.set()
        wakeup.notify()

    def _loop(self) -> None:
        while True:
            try:
                return self._claim_and_settle()
            except MemoryError:
                # A handler thread exhausting the memory limit can make any allocation
                # fail for a moment; its own MemoryError fails its delivery.
                logger.error("Out of memory in the worker loop; going on",
                             extra={"worker": self.id})
                self.interrupts.stop.wait(0.2)

    def _claim_and_settle(self) -> None:
        backoff = Backoff()
        stop = self.interrupts.stop
        idle = False
        while not stop.is_set():
            self._give_up_overdue()
            self._results.collect()
            if self._limit_reached():
                return
            if self._pool.stuck >= self.max_stuck or self._pool.exhausted:
                logger.error("%d handler thread(s) stuck past the time limit; stopping so the "
                             "process starts afresh", self._pool.stuck,
                             extra={"worker": self.id})
                self.recycle = True
                return
            # Finished messages awaiting their ack make room: the claim settles them.
            outstanding = len(self._held) - len(self._results.unflushed)
            room = self._most_held(outstanding) - outstanding
            want = min(room, self.options.batch_size, self._left())
            got = 0
            if want > 0 and (room >= self.options.batch_size or not outstanding):
                got = self._claim(want, peek=idle)
            due = self._results.due(self.options.batch_size)
            if due is not None and due <= time.monotonic():
                self._flush()
            idle = not got and not self._held
            if got:
                backoff.reset()
                continue
            if self.options.burst and not self._held and not self._results:
                return
            if self._results.wait_for(self._results_awaited()):
                continue
            backoff.sleep(self._results.due(self.options.batch_size))

    def _results_awaited(self) -> int:
        """How many more finished messages give the loop something to do: make room for
        a batch's claim, fill a batch of acks, or finish everything held.

        Why: waking the loop for every finished message cost a thread switch and a
        pass of the loop each, while it had work only once a batch.
        """
        outstanding = len(self._held) - len(self._results.unflushed)
        batch = self.options.batch_size
        most = max(1, min(outstanding, batch - len(self._results.unflushed)))
        for left in range(outstanding - 1, max(outstanding - most, 0), -1):
            if self._most_held(left) - left >= batch:
                return outstanding - left
        return most

    def _most_held(self, outstanding: int) -> int:
        """Messages the worker may hold unfinished: a batch beyond its threads, and one
        batch more while what is queued would run out before the next claim returns."""
        concurrency, batch = self.options.concurrency, self.options.batch_size
        queued = max(0, outstanding - concurrency)
        return concurrency + batch * (2 if self._pace.runs_dry(queued, concurrency) else 1)

    def _claim(self, limit: int, peek: bool = False) -> int:
        """Claim up to ``limit``, acking the finished messages in the same transaction."""
        acks = self._results.acks()
        started = time.monotonic()
        try:
            acked, messages = claim_ready(
                [get_queue(q.name) for q in self.queues], limit, owner=self.id,
                visibility_timeout=self.options.visibility_timeout, clock=self._promotion,
                where=self.where, peek=peek, acks=acks, hook=self._hook)
        except DatabaseError:
            logger.exception("Claim failed; retrying after a pause", extra={"worker": self.id})
            self._reset_connection()
            self.interrupts.stop.wait(1.0)
            return 0
        if messages:
            self._pace.claimed(time.monotonic() - started)
        if acks:
            self._results.acked(acks, acked)
        for message in messages:
            self._held[message.pk] = message
        for message in messages:
            self._pool.submit(message)
        self.stats.claimed += len(messages)
        return len(messages)

    def _in_claim_transaction(self, db: str, acks: Sequence[Message],
                              acked: Sequence[Message]) -> None:
        everything = set(self.options.queues)
        for hook, names in self._hooks.items():
            if names >= everything:  # the usual case: one hook for all the worker's queues
                hook(db, acks, acked)
                continue
            hook(db, *([m for m in group if m.queue.name in names] for group in (acks, acked)))

    def _left(self) -> int:
        """How many more messages ``--max-messages`` lets this worker claim."""
        limit = self.options.max_messages
        if limit is None:
            return self.options.batch_size
        return limit - self.stats.processed - len(self._held)

    def _limit_reached(self) -> bool:
        limit = self.options.max_messages
        if limit is not None and self.stats.processed >= limit:
            return True
        seconds = self.options.max_seconds
        return seconds is not None and time.monotonic() - self.stats.started >= seconds

    # Handler threads

    def _deliver(self, done: Done) -> None:
        if self._results.add(done):
            wakeup.notify()

    def _give_up_overdue(self) -> None:
        """Fail deliveries whose handler overran the time limit (their threads are replaced).

        An exactly-once handler holds its message's row lock in its open transaction,
        so its delivery cannot be failed from here: the worker lets go of it, and the
        lease expiry returns it once that transaction ends.
        """
        for message in self._pool.overdue():
            logger.error("Message %s: handler still running after %g s; thread abandoned",
                         message.pk, self.options.time_limit,
                         extra={"worker": self.id, "message_id": message.pk})
            if self._exactly_once(message):
                self._results.add(Done(message, lost=True))
            else:
                self._results.add(Done(message, error=(
                    f"TimeLimitExceeded: the handler ran longer than "
                    f"{self.options.time_limit:g} s")))

    def _exactly_once(self, message: Message) -> bool:
        entry = self.handlers[message.queue.name]
        return entry.exactly_once if entry.exactly_once is not None else message.queue.exactly_once

    def _execute(self, message: Message) -> Done:
        entry = self.handlers[message.queue.name]
        exactly_once = self._exactly_once(message)

        def call() -> None:
            hooked = entry.in_claim_transaction is not None
            with handlers.hook_runs_after() if hooked else contextlib.nullcontext():
                if entry.is_async:
                    asyncio.run(entry.func(message))
                else:
                    entry.func(message)

        try:
            self._check_idle_connection()
            if message.queue.skip_stale and groups.is_stale(message):
                logger.warning("Skipping a stale delivery of message %s: a later message of "
                               "group %r was acked", message.pk, message.group_key,
                               extra={"worker": self.id, "message_id": message.pk})
                return Done(message, lost=True)
            if exactly_once:
                run_and_ack(message, call)
                return Done(message, acked=True)
            started = time.monotonic()
            call()
            self._pace.handled(time.monotonic() - started)
            return Done(message)
        except NotOwner:
            return Done(message, lost=True)
        except BaseException as exc:
            if isinstance(exc, DatabaseError):
                self._reset_connection()
            return Done(message, error="".join(traceback.format_exception(exc)) or repr(exc))
        finally:
            close_old_connections()
            self._thread_state.last_used = time.monotonic()

    def _check_idle_connection(self) -> None:
        """Reconnect a handler thread whose connection sat idle and no longer answers.

        Why: the server may have closed it meanwhile (wait_timeout, KILL CONNECTION,
        a failover or proxy restart), and Django finds out only when a query fails —
        which would fail the next message's handler, again and again on a worker
        whose idle connections keep being cut. A ping after IDLE_CHECK seconds of
        idleness costs nothing on a busy thread.
        """
        last_used = getattr(self._thread_state, "last_used", None)
        if last_used is None or time.monotonic() - last_used < IDLE_CHECK:
            return
        conn = connections[vendor.alias()]
        if conn.connection is not None and not conn.is_usable():
            conn.close()

    # Results

    def _flush(self) -> None:
        """Settle finished messages now; what a DB error interrupts is kept for later."""
        try:
            self._results.flush()
        except DatabaseError:
            logger.exception("Recording results failed; retrying", extra={"worker": self.id})
            self._reset_connection()
            self.interrupts.stop.wait(0.5)

    def _forget(self, message: Message) -> None:
        self._held.pop(message.pk, None)

    # Shutdown

    def _shutdown(self) -> None:
        """Release unstarted work at once, let running handlers finish within the grace period."""
        self._release(self._drain_unstarted())
        grace = (self.options.shutdown_grace if self.options.shutdown_grace is not None
                 else self.settings.SHUTDOWN_GRACE)
        deadline = time.monotonic() + grace
        while True:
            with contextlib.suppress(Exception):
                self._flush()
            self._give_up_overdue()
            busy = len(self._held) - len(self._results.unflushed)
            if busy <= 0 or self.interrupts.force.is_set() or time.monotonic() >= deadline:
                break
            wakeup.wait(wakeup.generation, 0.05)
        self._release(self._drain_unstarted())
        unflushed = {d.message.pk for d in self._results.unflushed}
        still_running = [m for pk, m in self._held.items() if pk not in unflushed]
        if still_running:
            logger.warning("Releasing %d message(s) whose handlers did not finish in time",
                           len(still_running), extra={"worker": self.id})
            self._release(still_running)
        self._pool.stop()
        self.presence.deregister()
        logger.info("Worker %s stopped: %s", self.id, self.stats, extra={"worker": self.id})

    def _drain_unstarted(self) -> list[Message]:
        return self._pool.unstarted()

    def _release(self, messages: list[Message]) -> None:
        if not messages:
            return
        try:
            self.stats.released += release(messages)
        except DatabaseError:
            logger.exception("Could not release %d message(s); their leases will expire",
                             len(messages), extra={"worker": self.id})
        for message in messages:
            self._forget(message)

    @staticmethod
    def _reset_connection() -> None:
        connection = connections[vendor.alias()]
        with contextlib.suppress(DatabaseError):
            connection.close()
