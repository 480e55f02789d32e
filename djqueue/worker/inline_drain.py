"""Running queues' handlers in the caller's own thread, for tests: ``djqueue.drain()``.

A worker runs handlers on threads with their own connections, so inside a Django
``TestCase`` (one transaction, rolled back at the end) it would see none of the
test's rows. ``drain`` claims and runs one message at a time in the caller's
thread and transaction instead, and settles each as a worker does (ack, failure
with its retry or dead letter, Postpone, RetryAfter), so a test can send or
enqueue, drain, and assert on what the handlers did: what Celery's eager mode,
Oban's ``drain_queue`` and django.tasks' immediate backend give their users, but
through the real claim, lease and ack.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from djqueue.api.queue_operations import retry_now
from djqueue.api.receiving import receive
from djqueue.exceptions import NotOwner, QueueNotFound, shown_value
from djqueue.models import Message, Queue, State
from djqueue.storage import partitions, placement
from djqueue.storage.queue_lookup import get_queue_on, queue_refs
from djqueue.worker import registry
from djqueue.worker.ack_batches import Done, settle_unacked
from djqueue.worker.handler_calls import HandlerCalls

#: The most deliveries one drain() runs unless told otherwise: a handler that fails or
#: postpones for ever, with ``delayed``, would otherwise never let it end.
DRAIN_LIMIT = 10_000


@dataclass
class Drained:
    """What one :func:`drain` did."""

    #: Deliveries claimed (a batch handler's run counts each of its messages).
    runs: int = 0
    acked: int = 0
    #: Failed runs, retried later or dead-lettered; their errors are in ``errors``.
    failed: int = 0
    #: Of those, the ones dead-lettered (at ``max_attempts``, or UnprocessableMessage).
    dead_lettered: int = 0
    #: Runs that raised Postpone: their message was given back for a while.
    postponed: int = 0
    #: Runs whose message was no longer theirs to settle (a stale ordered delivery).
    lost: int = 0
    #: The recorded error of each failed run, in order (tracebacks).
    errors: list[str] = field(default_factory=list)


def drain(*queues: str | Queue, delayed: bool = False, limit: int = DRAIN_LIMIT) -> Drained:
    """Run the handlers of ``queues`` (default: every queue with a handler, django.tasks
    queues included) on their ready messages, one at a time in this thread and its
    transaction, until none is ready or ``limit`` runs were made; settle each as a
    worker does. Messages sent by the handlers run too, if their queue is drained.

    ``delayed``: messages waiting on a delay, a retry's backoff or a Postpone are
    made ready at once, again after every run, so retries run to their end. The
    queues' own rules hold: paused queues, ordered groups, rate and concurrency
    limits (a limit that holds a message back ends the drain, as nothing is ready).
    Handlers that are ``async`` run with ``async_to_sync``: call from sync code. A batch
    handler gets up to its ``batch`` of its queue's ready messages a run.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"drain() needs a limit of at least 1 run, got {shown_value(limit)}.")
    names = [q.name if isinstance(q, Queue) else q for q in queue_refs(queues)] or (
        _handled_queues())
    handlers, rows = registry.serving(names)
    calls = HandlerCalls("djqueue.drain", handlers, None, inline=True)
    drained = Drained()
    while drained.runs < limit:
        if delayed:
            for row in rows:
                _make_due(row, limit)
        got = receive(names, owner="djqueue.drain") if names else []
        if not got:
            break
        most = calls.batches.get(got[0].queue.name)
        if most is None:
            drained.runs += 1
            _settle(calls.execute(got[0]), drained)
            continue
        # A batch handler takes its queue's ready messages together, as a worker's claim
        # hands them over (a partition's own queue row names the rest).
        more = min(most, limit - drained.runs) - 1
        if more:
            got += receive(got[0].queue, max_messages=more, owner="djqueue.drain")
        drained.runs += len(got)
        for done in calls.execute_batch(got):
            _settle(done, drained)
    return drained


def _handled_queues() -> list[str]:
    """Every queue a handler is registered for that exists (a django.tasks backend's
    queues are created on first use)."""
    sourced = registry.sourced_queues()
    existing = set(Queue.objects.using(placement.home()).values_list("name", flat=True))
    return [name for name in registry.known_queues() if name in existing or name in sourced]


def _make_due(queue: Queue, limit: int) -> None:
    """Make ``queue``'s scheduled messages ready now (on each of its partitions)."""
    if queue.partitions is not None:
        for db in partitions.served(queue):
            try:
                _make_due(get_queue_on(queue.name, db), limit)
            except QueueNotFound:
                continue
        return
    db = placement.database_of(queue)
    ids = list(Message.objects.using(db).filter(queue=queue, state=State.SCHEDULED)
               .values_list("pk", flat=True)[:limit])
    if ids:
        retry_now(ids, queue=queue)


def _settle(done: Done, drained: Drained) -> None:
    """Settle one run at once, as a worker's ack batches do for many."""
    try:
        if done.error is not None or done.postponed is not None:
            queue_id = done.message.queue_id
            row = settle_unacked(done)
            if done.error is None:
                drained.postponed += 1
                return
            drained.failed += 1
            drained.errors.append(done.error)
            if row.state == State.DEAD or row.queue_id != queue_id:
                drained.dead_lettered += 1
        elif done.acked:
            drained.acked += 1
        elif done.lost:
            drained.lost += 1
        else:
            done.message.ack()
            drained.acked += 1
    except NotOwner:
        drained.lost += 1
