"""Waking idle receivers when messages become ready other than by a send: a release
without a delay, a failure retried at once, a retry made now, a redrive, a claim the
reaper returns.

Each waits for the commit of the transaction that made the messages ready (a receiver
woken before it would find nothing and sleep again), then wakes as a send does
(``worker_wakeups.wake_receivers``): this process's receivers at once, other
processes' by datagram.

Storage may not import this package, so its changes reach it by signals, connected in
AppConfig.ready: ``messages_released`` (sent after the release commits) and
``message_retried`` (sent inside the failure's transaction, for each message).

One transaction can make many messages ready: the reaper returns up to 500 claims in
one, each a retry at once. The queues to wake gather per thread and database until a
commit, and the first of that commit's callbacks wakes them all, once; the others find
nothing left. Queues gathered in a transaction that rolled back are woken at the next
commit on that database: a receiver woken for nothing claims once, finds nothing and
sleeps, where one not woken would have waited for its next poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from django.db import transaction

from djqueue.api.worker_wakeups import wake_receivers
from djqueue.models import Message, State
from djqueue.storage import dialects, fastpath
from djqueue.storage.queue_lookup import get_queue_by_id

logger = logging.getLogger("djqueue.worker")


class _Gathered(threading.local):
    """This thread's queue ids to wake at the next commit, by database alias."""

    def __init__(self) -> None:
        self.by_database: dict[str, set[int]] = {}


_gathered = _Gathered()


def wake_on_commit(database: str, queue_ids: Iterable[int]) -> None:
    """Wake the idle receivers of the queues ``queue_ids`` (on ``database``) once the
    transaction open there commits (at once outside one)."""
    ids = set(queue_ids)
    if ids:
        _gathered.by_database.setdefault(database, set()).update(ids)
        transaction.on_commit(lambda: _wake_gathered(database), using=database)


def _wake_gathered(database: str) -> None:
    ids = _gathered.by_database.pop(database, None)
    if ids:
        _wake_queues(database, ids)


def _wake_queues(database: str, queue_ids: set[int]) -> None:
    """A failure here costs only a wait for the receivers' next poll: it is logged, not
    raised (the change has committed; its caller should not see an error)."""
    try:
        wake_receivers(database, {get_queue_by_id(pk, database).name for pk in queue_ids})
    except Exception:  # a hint lost: the receivers' polls find the messages
        logger.warning("Could not wake the receivers of queues %s", sorted(queue_ids),
                       exc_info=True)


def wake_for_released(messages: list[Message], delay: float | None, database: str,
                      **signal: object) -> None:
    """The ``messages_released`` receiver: messages given back without a delay are ready
    again (an HTTP nack, an aborted OwnerSession, a stopping worker's prefetched
    messages). The signal comes once the release has committed."""
    if not delay:
        _wake_queues(database, {m.queue_id for m in messages})


def wake_for_retried(message: Message, **signal: object) -> None:
    """The ``message_retried`` receiver: a failure retried at once (a delay of 0, a
    backoff step of 0, a claim the reaper returns) left the message ready. The signal
    comes inside the failure's transaction; the wake-up waits for its commit."""
    if message.state == State.READY:
        wake_on_commit(fastpath.database_of(message) or dialects.alias(), [message.queue_id])
