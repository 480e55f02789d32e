"""Receiving messages: ``receive``, Q4M's owner mode (``consume``, ``OwnerSession``)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.db import DatabaseError
from django.db.models import Q

from djqueue import durations
from djqueue.api.condition_parser import compile_condition
from djqueue.api.receive_wakeups import receive_wakeups
from djqueue.durations import asked_delay, validate_delay
from djqueue.exceptions import InvalidMessage, NotOwner, Postpone, RetryAfter, shown_value
from djqueue.models import Message
from djqueue.polling import Backoff
from djqueue.rates import LimitWait
from djqueue.storage import dialects, partitions
from djqueue.storage.claims import by_database
from djqueue.storage.payloads import unstorable
from djqueue.storage.queue_lookup import QueueRef, get_queue, get_queues, queue_refs
from djqueue.storage.receiver_claims import PromotionClock, claim_ready, queues_with_ready
from djqueue.storage.requeueing import promote_due
from djqueue.storage.transitions import fail, release

#: The longest receiver name (the message row's owner column).
MAX_OWNER_CHARS = 100
#: The most messages one receive claims: a worker's largest claim and a peek's
#: (djqueue.worker.registry.MAX_BATCH, queue_operations.MAX_PEEK). Past 2**63 the
#: claim's LIMIT was each database's own error.
MAX_RECEIVE = 10_000


def check_lease(seconds: object) -> float:
    """A receive's ``visibility_timeout``: above 0 and at most 12 hours (as extend())."""
    try:
        return durations.check(seconds, "visibility_timeout", high=durations.MAX_LEASE)
    except ValueError as exc:
        raise InvalidMessage(str(exc)) from None


def check_owner(owner: object) -> str:
    """A receiver's name, as the message rows store it."""
    if not isinstance(owner, str) or not owner or len(owner) > MAX_OWNER_CHARS:
        raise InvalidMessage(f"owner must be a non-empty string of at most {MAX_OWNER_CHARS} "
                             f"characters, got {shown_value(owner)}.")
    why = unstorable(owner)
    if why is not None:
        raise InvalidMessage(f"owner {why}.")
    return owner


def default_owner() -> str:
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{threading.get_ident() % 10**9}"


_promotion = PromotionClock()


def queues_to_claim_from(names: Iterable[str]) -> set[str]:
    """Those of the queues ``names`` (or their partitions) that a claim would find a
    message on now, due scheduled ones promoted first (as a receive's claim does, at
    most every PROMOTE_INTERVAL); at most a read of the queues' rows and one of their
    messages per database. The HTTP API server's idle poll reads this once for all its
    long polls' queues instead of claiming on each. A paused queue has none; a name with
    no queue, or on a database that did not answer, is counted in: its claim says why."""
    asked = set(names)
    named = get_queues(asked)  # a statement per database, not one a queue
    found = asked - named.keys()
    queues = [queue for queue in named.values() if not queue.paused]
    for db, (on_db, _) in by_database(partitions.expand(queues), []).items():
        try:
            with dialects.using(db):
                if _promotion.due(db):
                    promote_due([q.pk for q in on_db])
                ready = queues_with_ready(on_db)
        except DatabaseError:
            found.update(q.name for q in on_db)
            continue
        found.update(q.name for q in on_db if q.pk in ready)
    return found


def receive(
    queues: QueueRef | Sequence[QueueRef],
    *,
    max_messages: int = 1,
    visibility_timeout: float | None = None,
    wait: float = 0,
    owner: str | None = None,
    where: Q | str | None = None,
) -> list[Message]:
    """Claim up to ``max_messages`` (1 to MAX_RECEIVE, 10,000) ready messages, earlier
    queues first.

    With ``wait`` it blocks up to that many seconds for a first message
    (long poll): a send that commits wakes it at once, in this process or in another
    on this host (djqueue.api.receive_wakeups), and it polls with an adaptive delay
    for the rest. Paused queues are skipped.
    ``where`` takes only messages matching a condition: a ``Q`` over Message
    fields, or an expression such as ``"priority >= 5 and headers.region = 'eu'"``
    (see djqueue.api.condition_parser).
    """
    with Receiving(queues, max_messages=max_messages, visibility_timeout=visibility_timeout,
                   wait=wait, owner=default_owner() if owner is None else owner,
                   where=where) as receiving:
        while not (messages := receiving.claim()) and not receiving.over():
            receiving.backoff.sleep(receiving.pause_ends())
        return messages


class Receiving:
    """One receive: its checked arguments, its claims, and when its next pause ends.
    ``receive`` and ``areceive`` (djqueue.api.async_receiving) each loop over one, on
    a thread and on an event loop, inside ``with``: from its first claim that finds
    nothing, sends in other processes wake it (djqueue.api.receive_wakeups), until the
    ``with`` ends."""

    def __init__(self, queues: QueueRef | Sequence[QueueRef], *, max_messages: int,
                 visibility_timeout: float | None, wait: float, owner: str,
                 where: Q | str | None) -> None:
        self.condition = compile_condition(where)
        self.refs = queue_refs(queues)
        if not self.refs:
            raise InvalidMessage("receive() needs at least one queue.")
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or not (
                1 <= max_messages <= MAX_RECEIVE):
            raise InvalidMessage(f"max_messages must be a whole number from 1 to "
                                 f"{MAX_RECEIVE:,}, got {shown_value(max_messages)}.")
        self.max_messages = max_messages
        self.visibility_timeout = (None if visibility_timeout is None
                                   else check_lease(visibility_timeout))
        self.deadline = time.monotonic() + (validate_delay(wait, "wait") or 0.0)
        self.owner = check_owner(owner)
        self.backoff = Backoff()
        #: What the last claim learnt of its queues' rate and concurrency limits.
        self.limited = LimitWait()
        self._waiting = contextlib.ExitStack()
        self._woken_by_sends = False

    def __enter__(self) -> Receiving:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._waiting.close()

    def claim(self) -> list[Message]:
        """One claim over its queues (and their partitions), earlier queues first. The
        first that finds nothing, with time left to wait, has it woken by sends from
        then on."""
        queues = [get_queue(r) for r in self.refs]
        expanded = partitions.expand(queues)
        _, messages = claim_ready(
            expanded, self.max_messages, owner=self.owner,
            visibility_timeout=self.visibility_timeout, clock=_promotion,
            where=self.condition, wait=self.limited)
        if not messages and not self._woken_by_sends and not self.over():
            # A send names the queue it stored on: a partition's, for a partitioned queue.
            names = {q.name for q in (*queues, *expanded)}
            self._waiting.enter_context(receive_wakeups.waiting(names))
            self._woken_by_sends = True
        return messages

    def over(self) -> bool:
        return time.monotonic() >= self.deadline

    def pause_ends(self) -> float:
        """The deadline, or sooner: when a limit of its queues may let a claim through."""
        if self.limited.seconds is None:
            return self.deadline
        return min(self.deadline, time.monotonic() + self.limited.seconds)


@contextlib.contextmanager
def consume(
    queue: QueueRef | Sequence[QueueRef],
    *,
    wait: float = 0,
    visibility_timeout: float | None = None,
) -> Iterator[Message | None]:
    """Q4M owner mode for one message: ack on clean exit, record the failure on exception
    (a Postpone or a RetryAfter is done as it asks, see :class:`OwnerSession`).

    Yields None when nothing arrived within ``wait`` seconds.
    """
    with OwnerSession(queue, visibility_timeout=visibility_timeout) as session:
        yield session.next(wait=wait)


class OwnerSession:
    """Consecutive ``queue_wait()`` calls: receiving the next message acks the previous one.

    Leaving the ``with`` block acks the current message, or on an exception
    records it as a failed delivery (retried with backoff, or dead-lettered). A
    Postpone gives it back for its delay, uncounted; a RetryAfter fails it with the
    retry after its delay; neither goes on past the block.
    """

    def __init__(self, queues: QueueRef | Sequence[QueueRef], *,
                 visibility_timeout: float | None = None) -> None:
        self.queues = queues
        self.visibility_timeout = visibility_timeout
        self.owner = default_owner()
        self.current: Message | None = None

    def next(self, wait: float = 0) -> Message | None:
        self.end()
        got = receive(self.queues, wait=wait, visibility_timeout=self.visibility_timeout,
                      owner=self.owner)
        self.current = got[0] if got else None
        return self.current

    def end(self) -> None:
        """Ack the current message (Q4M ``queue_end``)."""
        message, self.current = self.current, None
        if message is not None:
            message.ack()

    def abort(self) -> None:
        """Give the current message back uncounted (Q4M ``queue_abort``)."""
        message, self.current = self.current, None
        if message is not None:
            release([message])

    def __enter__(self) -> OwnerSession:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        """Ack on a clean exit; on an exception record the failure, and let the
        exception go on. A Postpone or a RetryAfter is done as it asks, and ends there."""
        if exc is None:
            self.end()
            return False
        message, self.current = self.current, None
        asked = isinstance(exc, Postpone | RetryAfter)
        if message is None:
            return asked
        error, delay = "".join(traceback.format_exception(exc)), None
        if isinstance(exc, Postpone | RetryAfter):  # asked
            delay, invalid = asked_delay(exc)
            if isinstance(exc, Postpone) and invalid is None:
                release([message], delay=delay)
                return True
            error = invalid or error
        with contextlib.suppress(NotOwner):
            fail(message, error, delay=delay)
        return asked
