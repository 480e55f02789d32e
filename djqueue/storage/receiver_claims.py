"""What a receiver asks for (a worker's loop, ``receive()``, ``consume()``): ready
messages from its queues, on whichever databases they live, with its acks.

On top of the claim transaction (djqueue.storage.claims) this adds what a round of
claims needs: the queues grouped by database (a database that does not answer is
passed over while the others are served), a cheap read before a claim for a
receiver that found nothing last time, promotion of due scheduled messages when a
claim comes up short (at most once a ``PROMOTE_INTERVAL``), and telling a bad
condition from a failing database.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError, DataError, IntegrityError
from django.db.models import Exists, OuterRef, Q

from djqueue.conf import get_settings
from djqueue.exceptions import InvalidCondition
from djqueue.models import Message, Queue, State
from djqueue.rates import LimitWait
from djqueue.storage import dialects, expiry, host_clock, partitions
from djqueue.storage.claims import ack_and_claim, by_database
from djqueue.storage.requeueing import promote_due
from djqueue.types import AckHook


class PromotionClock:
    """Lets one receiving loop promote due scheduled messages at most once a PROMOTE_INTERVAL
    on each database."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def due(self, db: str) -> bool:
        now = time.monotonic()
        if now - self.last.get(db, 0.0) < get_settings().PROMOTE_INTERVAL:
            return False
        self.last[db] = now
        return True


def claim_ready(
    queues: Sequence[Queue],
    limit: int,
    *,
    owner: str,
    visibility_timeout: float | None,
    clock: PromotionClock,
    where: Q | None = None,
    peek: bool = False,
    acks: list[Message] | None = None,
    hook: AckHook | None = None,
    wait: LimitWait | None = None,
) -> tuple[list[Message], list[Message]]:
    """Claim from the unpaused ``queues``; if that comes up short, promote due scheduled
    messages (throttled by ``clock``) and claim the rest. ``peek`` (for a receiver
    that found nothing last time) checks for ready messages before opening a claim.
    ``acks`` are acked in the first transaction, ``hook`` running in the ack (see
    :func:`ack_and_claim`). ``wait`` is cleared, then learns how soon a limited
    queue may let more start. Returns (acked, claimed)."""
    if wait is not None:
        wait.clear()
    acks = acks or []
    active = [q for q in queues if not q.paused]
    found = by_database(active, acks)
    if len(found) == 1:  # the usual case: every queue on one database
        [(db, (active, acks))] = found.items()
        with dialects.using(db):
            return _claim_checked(acks, active, limit, owner=owner,
                                  visibility_timeout=visibility_timeout, clock=clock,
                                  where=where, peek=peek, hook=hook, wait=wait)
    acked: list[Message] = []
    claimed: list[Message] = []
    failed: DatabaseError | None = None
    for db, (active, acks) in found.items():  # earlier queues' databases first
        try:
            with dialects.using(db):
                done, got = _claim_checked(acks, active, max(limit - len(claimed), 0),
                                           owner=owner, visibility_timeout=visibility_timeout,
                                           clock=clock, where=where, peek=peek, hook=hook,
                                           wait=wait)
        except DatabaseError as exc:
            # A database that does not answer (a partition's server is down) is passed
            # over while the others are served; acks for it must not be dropped.
            if acks or not partitions.unreachable(exc):
                raise
            partitions.mark_down(db, exc)
            failed = exc
            continue
        acked += done
        claimed += got
    if failed is not None and not claimed and not acked:
        raise failed
    return acked, claimed


def _claim_checked(acks: list[Message], active: list[Queue], limit: int, *, owner: str,
                   visibility_timeout: float | None, clock: PromotionClock,
                   where: Q | None, peek: bool, hook: AckHook | None,
                   wait: LimitWait | None) -> tuple[list[Message], list[Message]]:
    """claim_ready on the current database."""
    if not active or limit <= 0:
        return ack_and_claim(acks, [], 0, owner=owner, hook=hook) if acks else ([], [])
    try:
        return _claim_ready(acks, active, limit, owner=owner,
                            visibility_timeout=visibility_timeout, clock=clock, where=where,
                            peek=peek, hook=hook, wait=wait)
    except (DatabaseError, RecursionError, OverflowError) as exc:
        if where is None or not condition_at_fault(exc):
            raise
        raise InvalidCondition(f"The condition cannot be evaluated ({exc})", 1, "") from None


def condition_at_fault(exc: BaseException) -> bool:
    """Whether an error raised by a conditional claim is the condition's: Python could
    not build it (RecursionError, OverflowError), the database refused its values
    (DataError; MySQL reports arithmetic out of range as an IntegrityError, and a
    claim writes no constrained column), or the same database still answers a
    plain query (so the error was not the connection's)."""
    if isinstance(exc, RecursionError | OverflowError | DataError | IntegrityError):
        return True
    try:
        Message.objects.using(dialects.alias()).filter(pk=0).exists()
    except DatabaseError:
        return False
    return True


def _claim_ready(acks: list[Message], active: Sequence[Queue], limit: int, *, owner: str,
                 visibility_timeout: float | None, clock: PromotionClock,
                 where: Q | None, peek: bool, hook: AckHook | None,
                 wait: LimitWait | None) -> tuple[list[Message], list[Message]]:
    acked: list[Message] = []
    messages: list[Message] = []
    if acks or not peek or _any_ready(active, where):
        acked, claimed = ack_and_claim(acks, active, limit, owner=owner,
                                       visibility_timeout=visibility_timeout, where=where,
                                       hook=hook, wait=wait)
        messages = _live(claimed, active, limit, owner=owner,
                         visibility_timeout=visibility_timeout, where=where, wait=wait)
    if len(messages) < limit and clock.due(dialects.alias()) and promote_due(
            [q.pk for q in active]):
        claimed = ack_and_claim([], active, limit - len(messages), owner=owner,
                                visibility_timeout=visibility_timeout, where=where,
                                wait=wait)[1]
        messages += _live(claimed, active, limit - len(messages), owner=owner,
                          visibility_timeout=visibility_timeout, where=where, wait=wait)
    return acked, messages


#: How many claims, at most, a receive makes again for messages it set aside as expired.
EXPIRED_ROUNDS = 8


def _live(claimed: list[Message], active: Sequence[Queue], limit: int,
          **claiming: Any) -> list[Message]:
    """The claimed messages that have not expired; the expired ones are dead-lettered
    (djqueue.storage.expiry). While a claim came back full but for expired ones, claim
    again for the rest (up to EXPIRED_ROUNDS times), so that a receive of one message
    behind an expired one does not come back empty. A claim that found nothing but
    expired messages first has the heads of their queues swept (expiry.sweep_head):
    a run of thousands of them, on a queue no reaper sweeps (no ``message_ttl``),
    costs a few reads of the head instead of a claim each."""
    db = dialects.alias()
    messages = expiry.set_aside_expired(db, claimed, host_clock.database_now(db))
    want, rounds = limit, 0
    while len(claimed) == want and len(messages) < limit and rounds < EXPIRED_ROUNDS:
        rounds += 1
        if rounds == 1 and not messages:
            for queue_id in {m.queue_id for m in claimed}:
                expiry.sweep_head(db, queue_id, host_clock.database_now(db))
        want = limit - len(messages)
        claimed = ack_and_claim([], active, want, **claiming)[1]
        messages += expiry.set_aside_expired(db, claimed, host_clock.database_now(db))
    return messages


def _any_ready(queues: Sequence[Queue], where: Q | None) -> bool:
    """A plain indexed read: an idle receiver's poll costs one statement, not a transaction."""
    ready = Message.objects.using(dialects.alias()).filter(
        queue_id__in=[q.pk for q in queues], state=State.READY)
    return (ready.filter(where) if where is not None else ready).exists()


def queues_with_ready(queues: Sequence[Queue]) -> set[int]:
    """Ids of those of ``queues`` (on the current database) with a ready message: one
    statement, an index probe a queue (djqueue_msg_claim). An idle poll over many queues
    reads this where it would open a claim on each."""
    db = dialects.alias()
    ready = Message.objects.using(db).filter(queue_id=OuterRef("pk"), state=State.READY)
    return set(Queue.objects.using(db).filter(pk__in=[q.pk for q in queues])
               .filter(Exists(ready)).values_list("pk", flat=True))
