"""Running one message's handler on a handler thread: the call, and what came of it.

A handler runs outside any transaction (unless its queue asks for exactly-once,
when it runs inside the transaction that acks it). Whatever it raises becomes
the delivery's error, so no handler can take its thread or the worker down; three
exceptions say instead what to do with the message: Postpone (give it back for a
while, uncounted), RetryAfter (a failure, retried after the delay it names) and
UnprocessableMessage (dead-letter it now). A stale delivery of an ordered group
is skipped, and a thread's connection that sat idle is checked before the handler
uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Callable

from django.db import DatabaseError, close_old_connections, connections

from djqueue import tracing
from djqueue.exceptions import NotOwner, Postpone, RetryAfter, UnprocessableMessage
from djqueue.models import Message
from djqueue.storage import dialects, fastpath, handler_reports, ordered_groups, placement
from djqueue.storage.transitions import asked_delay, run_and_ack
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

    def exactly_once(self, message: Message) -> bool:
        queue = message.queue
        return _exactly_once(self.handlers[queue.name], queue.exactly_once)

    def execute(self, message: Message) -> Done:
        queue = message.queue
        entry = self.handlers[queue.name]
        exactly_once = _exactly_once(entry, queue.exactly_once)
        func = entry.func
        around = (registry.hook_runs_after()
                  if entry.in_claim_transaction is not None and not self.inline else _NOTHING)

        def call() -> None:
            with around, tracing.processing(queue.name, message.pk, message.attempts,
                                            message.group_key, message.headers):
                if entry.is_async:
                    asyncio.run(func(message))
                else:
                    func(message)

        # What the handler's run writes (its task record, progress, a workflow's join)
        # goes to its message's database (djqueue.storage.placement).
        with dialects.using(fastpath.database_of(message)):
            return self._run(message, queue.skip_stale, call, exactly_once)

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
        """
        last_used = getattr(self._thread_state, "last_used", None)
        if last_used is None or time.monotonic() - last_used < IDLE_CHECK:
            return
        conn = connections[dialects.alias()]
        if conn.connection is not None and not conn.is_usable():
            conn.close()


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


def _exactly_once(entry: registry.Handler, queue_says: bool) -> bool:
    """The handler's own choice, else its queue's ``exactly_once`` option."""
    return entry.exactly_once if entry.exactly_once is not None else queue_says
