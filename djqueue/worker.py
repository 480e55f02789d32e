"""The worker: claims messages in batches and runs their handlers on a pool of threads.

One loop thread claims (prefetching up to ``batch_size`` beyond the busy
threads), collects results and acks them in batches; a heartbeat thread keeps
the worker row and its session lock alive. Handlers run outside any
transaction unless their queue asks for exactly-once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import queue as stdqueue
import socket
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, close_old_connections, connections
from django.utils import timezone

from djqueue import groups, handlers, signals, vendor
from djqueue.claims import PromotionClock, claim_ready
from djqueue.conditions import compile_condition
from djqueue.conf import get_settings
from djqueue.exceptions import DjqueueError, NotOwner
from djqueue.handlers import Handler
from djqueue.interrupts import Interrupts
from djqueue.lifecycle import ack_many, fail, release, run_and_ack
from djqueue.models import Message, Queue
from djqueue.models import Worker as WorkerRow
from djqueue.queues import create_queue, get_queue
from djqueue.wakeup import Backoff, wakeup

logger = logging.getLogger("djqueue.worker")


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


@dataclass(frozen=True)
class Done:
    """What became of one message's handler run."""

    message: Message
    error: str | None = None
    #: The ack already happened (exactly-once mode acks inside the handler's transaction).
    acked: bool = False
    #: The lease was lost before the handler could run (exactly-once mode), or the
    #: delivery was stale and skipped (``Queue.skip_stale``).
    lost: bool = False


@dataclass
class WorkerStats:
    claimed: int = 0
    acked: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def processed(self) -> int:
        return self.acked + self.failed + self.lost


class Worker:
    def __init__(self, options: WorkerOptions) -> None:
        if options.concurrency < 1 or options.batch_size < 1:
            raise ValueError("concurrency and batch_size must be at least 1.")
        self.options = options
        self.settings = get_settings()
        handlers.discover()
        self.handlers: dict[str, Handler] = {q: handlers.resolve(q) for q in options.queues}
        task_queues = handlers.task_queues()
        self.queues: list[Queue] = [
            create_queue(name, exist_ok=True) if name in task_queues else get_queue(name, fresh=True)
            for name in options.queues]
        self.where = compile_condition(options.where)
        self.lock_key = uuid.uuid4().hex
        self.id = f"{socket.gethostname()[:60]}:{os.getpid()}:{self.lock_key[:8]}"
        self.interrupts = Interrupts()
        self.stats = WorkerStats()
        self._tasks: stdqueue.SimpleQueue[Message | None] = stdqueue.SimpleQueue()
        self._done: collections.deque[Done] = collections.deque()
        #: Claimed and not yet settled; only the loop thread touches it.
        self._held: dict[int, Message] = {}
        self._returned: list[Message] = []
        self._unflushed: list[Done] = []
        self._threads: list[threading.Thread] = []
        self._lock = vendor.SessionLock(self.lock_key)
        self._promotion = PromotionClock()

    # Lifecycle

    def run(self) -> int:
        """Work until stopped or a limit is reached; returns the process exit code."""
        with self.interrupts.installed():
            self._register()
            heartbeat = threading.Thread(target=self._heartbeat, name="djqueue-heartbeat",
                                         daemon=True)
            heartbeat.start()
            self._threads = [
                threading.Thread(target=self._run_handlers, name=f"djqueue-handler-{i}",
                                 daemon=True)
                for i in range(self.options.concurrency)]
            for thread in self._threads:
                thread.start()
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
                signals.worker_stopped.send(sender=Worker, worker=self)
        return 0

    def stop(self) -> None:
        self.interrupts.stop.set()
        wakeup.notify()

    def _loop(self) -> None:
        backoff = Backoff()
        stop = self.interrupts.stop
        while not stop.is_set():
            self._flush()
            if self._limit_reached():
                return
            room = self.options.concurrency + self.options.batch_size - len(self._held)
            got = 0
            if room >= self.options.batch_size or not self._held:
                got = self._claim(min(room, self.options.batch_size))
            if got:
                backoff.reset()
                continue
            if self.options.burst and not self._held and not self._done:
                return
            backoff.sleep()

    def _claim(self, limit: int) -> int:
        try:
            messages = claim_ready([get_queue(q.name) for q in self.queues], limit,
                                   owner=self.id,
                                   visibility_timeout=self.options.visibility_timeout,
                                   clock=self._promotion, where=self.where)
        except DatabaseError:
            logger.exception("Claim failed; retrying after a pause", extra={"worker": self.id})
            self._reset_connection()
            self.interrupts.stop.wait(1.0)
            return 0
        for message in messages:
            self._held[message.pk] = message
        for message in messages:
            self._tasks.put(message)
        self.stats.claimed += len(messages)
        return len(messages)

    def _limit_reached(self) -> bool:
        limit = self.options.max_messages
        if limit is not None and self.stats.processed >= limit:
            return True
        seconds = self.options.max_seconds
        return seconds is not None and time.monotonic() - self.stats.started >= seconds

    # Handler threads

    def _run_handlers(self) -> None:
        while True:
            message = self._tasks.get()
            if message is None:
                return
            if self.interrupts.stop.is_set():
                self._returned.append(message)
                continue
            self._done.append(self._execute(message))
            wakeup.notify()

    def _execute(self, message: Message) -> Done:
        entry = self.handlers[message.queue.name]
        exactly_once = entry.exactly_once if entry.exactly_once is not None else (
            message.queue.exactly_once)

        def call() -> None:
            if entry.is_async:
                asyncio.run(entry.func(message))
            else:
                entry.func(message)

        try:
            if message.queue.skip_stale and groups.is_stale(message):
                logger.warning("Skipping a stale delivery of message %s: a later message of "
                               "group %r was acked", message.pk, message.group_key,
                               extra={"worker": self.id, "message_id": message.pk})
                return Done(message, lost=True)
            if exactly_once:
                run_and_ack(message, call)
                return Done(message, acked=True)
            call()
            return Done(message)
        except NotOwner:
            return Done(message, lost=True)
        except BaseException as exc:
            if isinstance(exc, DatabaseError):
                self._reset_connection()
            return Done(message, error="".join(traceback.format_exception(exc)) or repr(exc))
        finally:
            close_old_connections()

    # Results

    def _flush(self) -> None:
        """Ack finished messages in a batch, record failures; keep what a DB error interrupts."""
        while self._done:
            self._unflushed.append(self._done.popleft())
        if not self._unflushed:
            return
        try:
            self._settle_acks()
            while self._unflushed:
                done = self._unflushed[0]
                if done.error is not None:
                    self._record_failure(done.message, done.error)
                elif done.acked:
                    self.stats.acked += 1
                else:
                    self.stats.lost += 1
                self._unflushed.pop(0)
                self._forget(done.message)
        except DatabaseError:
            logger.exception("Recording results failed; retrying", extra={"worker": self.id})
            self._reset_connection()
            self.interrupts.stop.wait(0.5)

    def _settle_acks(self) -> None:
        acks = [d.message for d in self._unflushed if d.error is None and not (d.acked or d.lost)]
        if not acks:
            return
        acked = {m.pk for m in ack_many(acks)}
        self.stats.acked += len(acked)
        for message in acks:
            if message.pk not in acked:
                self.stats.lost += 1
                logger.warning("Message %s finished after its lease was lost; it will run again",
                               message.pk, extra={"worker": self.id, "message_id": message.pk})
            self._forget(message)
        settled = {m.pk for m in acks}
        self._unflushed = [d for d in self._unflushed if d.message.pk not in settled]

    def _forget(self, message: Message) -> None:
        self._held.pop(message.pk, None)

    def _record_failure(self, message: Message, error: str) -> None:
        try:
            fail(message, error)
            self.stats.failed += 1
        except NotOwner:
            self.stats.lost += 1
        logger.warning("Message %s failed (attempt %s)", message.pk, message.attempts,
                       extra={"worker": self.id, "message_id": message.pk, "error": error[-500:]})

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
            busy = len(self._held) - len(self._unflushed)
            if busy <= 0 or self.interrupts.force.is_set() or time.monotonic() >= deadline:
                break
            wakeup.wait(wakeup.generation, 0.05)
        self._release(self._drain_unstarted())
        unflushed = {d.message.pk for d in self._unflushed}
        still_running = [m for pk, m in self._held.items() if pk not in unflushed]
        if still_running:
            logger.warning("Releasing %d message(s) whose handlers did not finish in time",
                           len(still_running), extra={"worker": self.id})
            self._release(still_running)
        for _ in self._threads:
            self._tasks.put(None)
        self._deregister()

    def _drain_unstarted(self) -> list[Message]:
        unstarted = list(self._returned)
        self._returned.clear()
        while True:
            try:
                message = self._tasks.get_nowait()
            except stdqueue.Empty:
                break
            if message is not None:
                unstarted.append(message)
        return unstarted

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

    # Registration and heartbeat

    def _register(self) -> None:
        if not self._lock.acquire():
            raise DjqueueError(f"Session lock {self.lock_key} is already held.")
        WorkerRow.objects.using(vendor.alias()).update_or_create(
            pk=self.id, defaults={
                "hostname": socket.gethostname()[:255], "pid": os.getpid(),
                "lock_key": self.lock_key, "queues": self.options.queues,
                "concurrency": self.options.concurrency, "heartbeat_at": timezone.now()})
        logger.info("Worker %s started on %s", self.id, ", ".join(self.options.queues),
                    extra={"worker": self.id})

    def _deregister(self) -> None:
        try:
            WorkerRow.objects.using(vendor.alias()).filter(pk=self.id).delete()
        except DatabaseError:
            logger.exception("Could not delete the worker row", extra={"worker": self.id})
        self._lock.close()
        logger.info("Worker %s stopped: %s", self.id, self.stats, extra={"worker": self.id})

    def _heartbeat(self) -> None:
        interval = self.settings.HEARTBEAT_INTERVAL
        while not self.interrupts.stop.wait(interval):
            try:
                if not self._lock.is_alive():
                    self._lock.acquire()
                beat = WorkerRow.objects.using(vendor.alias()).filter(pk=self.id).update(
                    heartbeat_at=timezone.now())
                if not beat:
                    logger.warning("Worker row was reaped; registering again",
                                   extra={"worker": self.id})
                    self._register()
            except DatabaseError:
                logger.exception("Heartbeat failed", extra={"worker": self.id})
                self._reset_connection()
        connections.close_all()

    @staticmethod
    def _reset_connection() -> None:
        connection = connections[vendor.alias()]
        with contextlib.suppress(DatabaseError):
            connection.close()
