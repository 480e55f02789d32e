"""The worker: claims messages in batches and runs their handlers on a pool of threads.

One loop thread claims (prefetching up to ``batch_size`` beyond the busy
threads), collects results and acks them in batches; a heartbeat thread keeps
the worker row and its session lock alive. Handlers run outside any
transaction unless their queue asks for exactly-once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import cast

from django.db import DatabaseError

from djqueue import signals
from djqueue.api.condition_parser import checked_condition
from djqueue.api.worker_wakeups import WakeSocket
from djqueue.conf import get_settings
from djqueue.models import Message
from djqueue.polling import Backoff, local_wakeup, soonest
from djqueue.processes.base import ProcessBase
from djqueue.processes.garbage_collection import collected_less
from djqueue.processes.thread_switch import switch_interval
from djqueue.storage import partitions, placement
from djqueue.storage.failure_streaks import FailureStreak
from djqueue.storage.queue_lookup import get_queue
from djqueue.storage.registration import Registration
from djqueue.worker import handler_logs, registry
from djqueue.worker.ack_batches import AckBatches, Done, WorkerStats
from djqueue.worker.batch_windows import BatchWindows, batch_windows
from djqueue.worker.claim_hooks import ClaimHooks
from djqueue.worker.database_claims import DatabaseClaims
from djqueue.worker.handler_calls import HandlerCalls, reset_connection
from djqueue.worker.handler_threads import HandlerThreads
from djqueue.worker.held_messages import HeldMessages
from djqueue.worker.options import WorkerOptions
from djqueue.worker.prefetch import Prefetch
from djqueue.worker.run_limits import RunLimits
from djqueue.worker.supervised import is_supervised, report_started

logger = logging.getLogger("djqueue.worker")


class Worker(ProcessBase):
    logger = logger

    def __init__(self, options: WorkerOptions) -> None:
        self.stops_on_reload = not is_supervised()  # its supervisor replaces it instead
        super().__init__()
        self.options = options
        self.settings = get_settings()
        self.heartbeat_interval = self.settings.HEARTBEAT_INTERVAL
        self.handlers, self.queues = registry.serving(options.queues)
        self.where = checked_condition(options.where)
        self.lock_key = uuid.uuid4().hex
        self.id = f"{socket.gethostname()[:60]}:{os.getpid()}:{self.lock_key[:8]}"
        self.stats = WorkerStats()
        self.limits = RunLimits(options, self.id, self.stats, self.stop_signals)
        self._held = HeldMessages(self.id)
        self._lookups = FailureStreak(logger, "Looking up the queues", {"worker": self.id})
        self._hook = ClaimHooks(self.handlers, options.queues).hook()
        self._claims = DatabaseClaims(self.id, visibility_timeout=options.visibility_timeout,
                                      where=self.where, hook=self._hook,
                                      on_error=self._claim_failed)
        self._acks = AckBatches(self.id, self.stats, self._held.forget, self._hook,
                                pacing=self._claims.pacing)
        self._prefetch = Prefetch(options.concurrency, options.batch_size)
        self._calls = HandlerCalls(self.id, self.handlers, self._prefetch)
        self._windows = BatchWindows(batch_windows(self.handlers, self.queues,
                                                   options.visibility_timeout))
        # A run is one message, or a list of them for a batch handler (HandlerCalls.runs);
        # with no batch handler every run is one message, called without a type test.
        execute = self._calls.run if self._calls.batches else cast(
            "Callable[[Message | list[Message]], Done | list[Done]]", self._calls.execute)
        self._threads: HandlerThreads[Message | list[Message], Done | list[Done]] = (
            HandlerThreads(execute, self._deliver, size=options.concurrency,
                           time_limit=options.time_limit,
                           accepting=lambda: not self.stop_signals.stop.is_set()))
        wake_host = self.settings.WAKE_HOST
        self.wake_socket = (WakeSocket(wake_host, named=self._claims.pacing.woken)
                            if wake_host is not None else None)
        self.registration = Registration(
            self.id, self.lock_key, queues=options.queues, concurrency=options.concurrency,
            held=self._held.pks,
            wake_address=self.wake_socket.address if self.wake_socket else "",
            databases=list(dict.fromkeys(
                db for q in self.queues for db in (partitions.served(q) if q.partitions
                                                   is not None else [placement.database_of(q)]))))

    # Lifecycle (see ProcessBase.run: register, heartbeat, main, shutdown, deregister)

    def run(self) -> int:
        """Work until stopped or a limit is reached; returns the process exit code."""
        with switch_interval(self.settings.WORKER_SWITCH_INTERVAL), collected_less(
                self.settings.WORKER_GC_THRESHOLD):
            return super().run()

    def register(self) -> None:
        self.registration.register()
        handler_logs.install()
        logger.info("Worker %s started on %s: %s", self.id, ", ".join(self.options.queues),
                    self.options, extra={"worker": self.id})
        if self.wake_socket is not None:
            threading.Thread(target=self.wake_socket.listen_until, name="djqueue-wake-socket",
                             daemon=True, args=(self.stop_signals.stop,)).start()
        self._threads.start()
        signals.worker_started.send(sender=Worker, worker=self)
        report_started()  # to its supervisor, if any (a reload waits for it)

    def heartbeat(self) -> None:
        self.registration.beat()

    def main(self) -> int:
        try:
            self._loop()
        except Exception:
            logger.exception("Worker loop crashed; shutting down", extra={"worker": self.id})
            raise
        return 0

    def deregister(self) -> None:
        self.registration.deregister()
        if self.wake_socket is not None:
            self.wake_socket.close()
        logger.info("Worker %s stopped after %s", self.id, self.stats, extra={"worker": self.id})
        signals.worker_stopped.send(sender=Worker, worker=self)

    def _loop(self) -> None:
        while True:
            try:
                return self._claim_and_settle()
            except MemoryError:
                # A handler thread exhausting the memory limit can make any allocation
                # fail for a moment; its own MemoryError fails its delivery.
                logger.error("Out of memory in the worker loop; going on",
                             extra={"worker": self.id})
                self.stop_signals.stop.wait(0.2)

    def _claim_and_settle(self) -> None:
        backoff = Backoff()
        stop = self.stop_signals.stop
        idle = woken = False
        while not stop.is_set():
            self.show_alive()
            backoff.answered()  # before the results are collected and the claim starts
            self._give_up_overdue()
            self._acks.collect()
            for run in self._windows.due():  # a batch handler's list that waited its window
                self._threads.submit(run)
            if self.limits.reached(self._threads):  # what it holds is finished at shutdown
                return
            # Finished messages awaiting their ack make room: the claim settles them.
            # Messages held in a batch window are not at work: they make no room either.
            outstanding = len(self._held) - len(self._acks.unflushed) - self._windows.held
            room = self._prefetch.most_held(outstanding) - outstanding
            batch = self._prefetch.batch_size
            want = min(room, batch, self.limits.left(batch, len(self._held)))
            got = 0
            if want > 0 and (room >= batch or not outstanding):
                # An idle worker's poll reads before it opens a claim; one woken by a
                # send (or a finished handler) claims at once: that read was over a
                # third of an idle worker's pickup (docs/performance.md).
                got = self._claim(want, peek=idle and not woken)
            woken = False
            due = self._acks.due(self._prefetch.batch_size)
            if due is not None and due <= time.monotonic():
                self._flush()
            idle = not got and not self._held
            if got:
                backoff.reset()
                if got >= want:  # a full claim: more may be ready at once
                    continue
                # A short one took what was ready: the next claim waits for a finished
                # handler, a send's wake-up or the shortest poll, instead of finding
                # nothing at once (a trickling queue took four claims a message, now two).
            if self.options.burst and not self._held and not self._acks:
                return
            if self._acks.wait_for(self._prefetch.finished_awaited(
                    len(self._held) - self._windows.held, len(self._acks.unflushed))):
                continue
            woken = backoff.sleep(soonest(self._acks.due(self._prefetch.batch_size),
                                           self._claims.pacing.next_due(),
                                           self._windows.next_due(),
                                           seconds=self._claims.limit_wait.seconds))

    def _claim(self, limit: int, peek: bool = False) -> int:
        """Claim up to ``limit``, acking the finished messages in the same transactions
        (one a database: djqueue.worker.database_claims)."""
        started = time.monotonic()
        try:  # a queue's row is read again once QUEUE_CACHE_TTL has passed
            queues = partitions.expand([get_queue(q.name) for q in self.queues])
        except Exception as exc:  # the worker outlives a database that does not answer
            self._lookups.failed(exc, "retrying after a pause")
            self._claim_failed("", exc)
            self.stop_signals.stop.wait(1.0)
            return 0
        self._lookups.succeeded()
        for queue in queues:  # a partition added since the worker started
            self.registration.add_database(placement.database_of(queue))
        claimed = self._claims.claim(queues, self._acks.acks(), limit, peek=peek)
        self.stats.claims += 1
        if claimed.failed and not claimed.messages and not claimed.tried:
            self.stop_signals.stop.wait(1.0)  # nothing answered: pause before the next try
            return 0
        messages = claimed.messages
        self._prefetch.claimed(time.monotonic() - started, limit, len(messages))
        if claimed.tried:
            self._acks.acked(claimed.tried, claimed.acked)
        self._held.hold(messages)
        runs = self._calls.runs(messages) if self._calls.batches else messages
        for run in self._windows.add(runs) if self._windows else runs:
            self._threads.submit(run)
        self.stats.claimed += len(messages)
        return len(messages)

    def _claim_failed(self, db: str, exc: Exception) -> None:
        self.stats.claim_errors += 1
        if isinstance(exc, DatabaseError):
            reset_connection()

    # Handler threads

    def _deliver(self, done: Done | list[Done]) -> None:
        if isinstance(done, list):
            if any([self._acks.add(one) for one in done]):
                local_wakeup.notify()
        elif self._acks.add(done):
            local_wakeup.notify()

    def _give_up_overdue(self) -> None:
        """Fail deliveries whose handler overran the time limit (their threads are replaced).

        An exactly-once handler holds its message's row lock in its open transaction,
        so its delivery cannot be failed from here: the worker lets go of it, and the
        lease expiry returns it once that transaction ends.
        """
        for message in _messages(self._threads.overdue()):
            logger.error("Message %s: handler still running after %g s; thread abandoned",
                         message.pk, self.options.time_limit,
                         extra={"worker": self.id, "message_id": message.pk})
            if self._calls.exactly_once(message):
                self._acks.add(Done(message, lost=True))
            else:
                self._acks.add(Done(message, error=(
                    f"TimeLimitExceeded: the handler ran longer than "
                    f"{self.options.time_limit:g} s")))

    # AckBatches

    def _flush(self) -> None:
        """Settle finished messages now. A database that fails is left alone with its
        results (AckBatches.flush) while the loop goes on."""
        try:
            if self._acks.flush():
                reset_connection()
        except Exception:  # not a database's error: kept, and tried again
            logger.exception("Recording results failed; retrying", extra={"worker": self.id})
            self.stop_signals.stop.wait(0.5)

    # Shutdown

    def shutdown(self) -> None:
        """Release unstarted work at once, let running handlers finish within the grace period."""
        self._release(self._windows.take_all())
        grace = (self.options.shutdown_grace if self.options.shutdown_grace is not None
                 else self.settings.SHUTDOWN_GRACE)
        deadline = time.monotonic() + grace
        while True:
            self._release(_messages(self._threads.unstarted()))  # set aside since, too
            with contextlib.suppress(Exception):
                self._flush()
            self._give_up_overdue()
            busy = len(self._held) - len(self._acks.unflushed)
            if busy <= 0 or self.stop_signals.force.is_set() or time.monotonic() >= deadline:
                break
            self.show_alive()  # a bounded wait, not a hang (a reload's drain: not stale)
            local_wakeup.wait(local_wakeup.generation, 0.05)
        self._release(_messages(self._threads.unstarted()))
        still_running = self._held.other_than([d.message for d in self._acks.unflushed])
        if still_running:
            logger.warning("Releasing %d message(s) whose handlers did not finish in time",
                           len(still_running), extra={"worker": self.id})
            self._release(still_running)
        self._threads.stop()

    def _release(self, messages: list[Message]) -> None:
        self.stats.released += self._held.release(messages)


def _messages(runs: list[Message | list[Message]]) -> list[Message]:
    """The messages of handler runs, a batch handler's lists opened."""
    return [m for run in runs for m in (run if isinstance(run, list) else [run])]
