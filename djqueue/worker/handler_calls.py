"""Running a handler on a handler thread, for one message or a batch: the call, and what
came of it.

A handler runs outside any transaction (unless its queue asks for exactly-once,
when it runs inside the transaction that acks it). Whatever it raises becomes
the delivery's error, so no handler can take its thread or the worker down; three
exceptions say instead what to do with the message: Postpone (give it back for a
while, uncounted), RetryAfter (a failure, retried after the delay it names) and
UnprocessableMessage (dead-letter it now). A stale delivery of an ordered group
is skipped, and a thread's connection that sat idle is checked before the handler
uses it. A batch handler's exception fails each of its messages, but BatchFailures,
which fails only those it names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync
from django.db import DatabaseError, close_old_connections, connections

from djqueue import tracing
from djqueue.durations import asked_delay
from djqueue.exceptions import (
    BatchFailures,
    NotOwner,
    Postpone,
    RetryAfter,
    UnprocessableMessage,
)
from djqueue.models import Message
from djqueue.storage import dialects, fastpath, handler_reports, ordered_groups, placement
from djqueue.storage.transitions import run_and_ack
from djqueue.worker import registry
from djqueue.worker.ack_batches import Done
from djqueue.worker.prefetch import Prefetch

logger = logging.getLogger("djqueue.worker")
#: Seconds a handler thread's connection may sit idle before it is pinged before use.
IDLE_CHECK = 1.0
#: What a handler without an ack hook runs inside (reusable).
_NOTHING = contextlib.nullcontext()


def reset_connection() -> None:
    """Close djqueue's connections in this thread after a database error: the next
    statement on each opens a fresh one."""
    for db in {dialects.alias(), *placement.databases()}:
        with contextlib.suppress(DatabaseError):
            connections[db].close()


class HandlerCalls:
    """Calls the handlers of a worker's queues, one message at a time per thread.

    ``inline`` (no ``prefetch``): calls in the caller's thread and transaction, for
    djqueue.drain; no claim-transaction hook will run, and the caller's connections
    are neither checked, reset nor closed (they may hold a test's transaction).
    """

    def __init__(self, worker_id: str, handlers: dict[str, registry.Handler],
                 prefetch: Prefetch | None, *, inline: bool = False) -> None:
        self.worker_id = worker_id
        self.handlers = handlers
        self.inline = inline
        self._prefetch = prefetch
        self._thread_state = threading.local()
        #: The most messages a run of each batch handler's queue takes.
        self.batches = {name: entry.batch for name, entry in handlers.items()
                        if entry.batch is not None}

    def runs(self, messages: list[Message]) -> list[Message | list[Message]]:
        """The handler runs of one claim's ``messages``, in their order: a run a message,
        but a batch handler's messages in lists of up to its ``batch``."""
        if not self.batches:
            return list(messages)
        runs: list[Message | list[Message]] = []
        open_batches: dict[str, list[Message]] = {}
        for message in messages:
            name = message.queue.name
            most = self.batches.get(name)
            if most is None:
                runs.append(message)
                continue
            batch = open_batches.get(name)
            if batch is None or len(batch) >= most:
                batch = open_batches[name] = []
                runs.append(batch)
            batch.append(message)
        return runs

    def run(self, item: Message | list[Message]) -> Done | list[Done]:
        """One handler run of :meth:`runs`."""
        return self.execute_batch(item) if isinstance(item, list) else self.execute(item)

    def exactly_once(self, message: Message) -> bool:
        """Whether ``message``'s handler runs in the transaction that acks it (a batch
        handler never does; djqueue.worker.registry.serving refuses one on an
        exactly-once queue)."""
        queue = message.queue
        entry = self.handlers[queue.name]
        return entry.batch is None and _exactly_once(entry, queue.exactly_once)

    def execute(self, message: Message) -> Done:
        queue = message.queue
        entry = self.handlers[queue.name]
        exactly_once = _exactly_once(entry, queue.exactly_once)
        func = entry.func
        # An exactly-once run's ack is its own transaction's, which runs no hook.
        around = (registry.hook_runs_after() if entry.in_claim_transaction is not None
                  and not self.inline and not exactly_once else _NOTHING)

        def call() -> None:
            with around, tracing.processing(queue.name, message.pk, message.attempts,
                                            message.group_key, message.headers):
                if entry.is_async:
                    run_coroutine(func, message)
                else:
                    func(message)

        # What the handler's run writes (its task record, progress, a workflow's join)
        # goes to its message's database (djqueue.storage.placement).
        with dialects.using(fastpath.database_of(message)):
            return self._run(message, queue.skip_stale, call, exactly_once)

    def execute_batch(self, messages: list[Message]) -> list[Done]:
        """Call a batch handler with ``messages`` (of one queue, claimed together): those
        it did not fail are done, the stale deliveries of an ordered queue skipped."""
        queue = messages[0].queue
        entry = self.handlers[queue.name]
        if not self.inline:
            self._check_idle_connection()
        stale: list[Done] = []
        running = messages
        try:
            if queue.skip_stale:
                stale = [Done(m, lost=True) for m in messages if ordered_groups.is_stale(m)]
                skipped = {d.message.pk for d in stale}
                running = [m for m in messages if m.pk not in skipped]
            if not running:
                return stale
            started = time.monotonic()
            with dialects.using(fastpath.database_of(running[0])), \
                    tracing.processing_batch(queue.name, running), \
                    handler_reports.reporting(running):
                if entry.is_async:
                    run_coroutine(entry.func, running)
                else:
                    entry.func(running)
            if self._prefetch is not None:
                self._prefetch.handled((time.monotonic() - started) / len(running))
            return stale + [Done(message) for message in running]
        except BaseException as exc:
            if isinstance(exc, DatabaseError) and not self.inline:
                reset_connection()
            return stale + batch_outcomes(running, exc)
        finally:
            if not self.inline:
                close_old_connections()
            self._thread_state.last_used = time.monotonic()

    def _run(self, message: Message, skip_stale: bool, call: Callable[[], None],
             exactly_once: bool) -> Done:
        try:
            if not self.inline:
                self._check_idle_connection()
            if skip_stale and ordered_groups.is_stale(message):
                logger.warning("Skipping a stale delivery of message %s: a later message of "
                               "group %r was acked", message.pk, message.group_key,
                               extra={"worker": self.worker_id, "message_id": message.pk})
                return Done(message, lost=True)
            with handler_reports.reporting(message):
                if exactly_once:
                    run_and_ack(message, call)
                    return Done(message, acked=True)
                started = time.monotonic()
                call()
                if self._prefetch is not None:
                    self._prefetch.handled(time.monotonic() - started)
            return Done(message)
        except BaseException as exc:
            if isinstance(exc, DatabaseError) and not self.inline:
                reset_connection()
            return outcome_of(message, exc)
        finally:
            if not self.inline:
                close_old_connections()
            self._thread_state.last_used = time.monotonic()

    def _check_idle_connection(self) -> None:
        """Reconnect a handler thread whose connection sat idle and no longer answers.

        Why: the server may have closed it meanwhile (wait_timeout, KILL CONNECTION,
        a failover or proxy restart), and Django finds out only when a query fails —
        which would fail the next message's handler, again and again on a worker
        whose idle connections keep being cut. A ping after IDLE_CHECK seconds of
        idleness costs nothing on a busy thread.

        A thread's first run looks up the connection of each database djqueue works on
        (Django's wrapper: no connection is opened). Why: Django's close_old_connections
        after each run asks asgiref's Local for each alias, and does different work for
        one the thread has looked up and one it has not (raising and catching an
        AttributeError); which it was had depended on which thread first asked a
        database's vendor. Both cost about the same (docs: performance). Not every
        alias: one djqueue does not use may name a backend whose driver this process
        lacks, and its wrapper would fail to load.
        """
        last_used = getattr(self._thread_state, "last_used", None)
        if last_used is None:  # this thread's first run
            for db in placement.databases():  # so close_old_connections finds them
                connections[db]
            return
        if time.monotonic() - last_used < IDLE_CHECK:
            return
        conn = connections[dialects.alias()]
        if conn.connection is not None and not conn.is_usable():
            conn.close()


def run_coroutine(func: Callable[[Any], Awaitable[object]], argument: Any) -> None:
    """Run an async handler from this thread, as Django runs an async task function:
    with ``async_to_sync``, so that its thread-sensitive calls (the async ORM) run here,
    on this thread's connection and inside an exactly-once ack's transaction. A worker's
    handler thread keeps one event loop for it (djqueue.storage.fastpath.event_loops).
    Tasks the handler started and left running are cancelled when it returns, as
    ``asyncio.run`` would: nothing of one message's run goes on into the next."""
    fastpath.keep_event_loop()
    async_to_sync(_alone)(func, argument)


async def _alone(func: Callable[[Any], Awaitable[object]], argument: Any) -> None:
    try:
        await func(argument)
    finally:
        left = asyncio.all_tasks() - {asyncio.current_task()}
        for task in left:
            task.cancel()
        if left:
            await asyncio.gather(*left, return_exceptions=True)


def outcome_of(message: Message, exc: BaseException) -> Done:
    """What a handler's exception makes of its message: lost (NotOwner: the lease went
    first), given back for a while (Postpone), dead-lettered now (UnprocessableMessage),
    or a failure, retried after the delay a RetryAfter names or the queue's backoff."""
    if isinstance(exc, NotOwner):
        return Done(message, lost=True)
    if isinstance(exc, Postpone | RetryAfter):
        delay, invalid = asked_delay(exc)
        if isinstance(exc, Postpone) and invalid is None:
            return Done(message, postponed=delay)
        return Done(message, error=invalid or "".join(traceback.format_exception(exc)),
                    retry_delay=delay)
    error = "".join(traceback.format_exception(exc)) or repr(exc)
    return Done(message, error=error, dead=isinstance(exc, UnprocessableMessage))


def batch_outcomes(messages: list[Message], exc: BaseException) -> list[Done]:
    """What a batch handler's exception makes of its messages: BatchFailures fails those
    it names, each as its own exception would, and the rest are done; a BatchFailures
    that names a message not in the batch, or any other exception, fails them all."""
    if not isinstance(exc, BatchFailures):
        return [outcome_of(message, exc) for message in messages]
    by_id = {message.pk: message for message in messages}
    failed: dict[int, BaseException] = {}
    for named, failure in exc.failures.items():
        pk = named.pk if isinstance(named, Message) else named
        if isinstance(pk, bool) or not isinstance(pk, int) or pk not in by_id:
            error = ValueError(f"BatchFailures names {named!r}, which is not a message of "
                               f"this batch (its ids: {sorted(by_id)}); the whole batch failed.")
            return [outcome_of(message, error) for message in messages]
        failed[pk] = failure if isinstance(failure, BaseException) else Exception(str(failure))
    return [outcome_of(message, failed[message.pk]) if message.pk in failed
            else Done(message) for message in messages]


def _exactly_once(entry: registry.Handler, queue_says: bool) -> bool:
    """The handler's own choice, else its queue's ``exactly_once`` option."""
    return entry.exactly_once if entry.exactly_once is not None else queue_says
