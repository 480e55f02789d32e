"""Claiming ready messages: one short transaction per batch, acks riding along.

The statements differ per database (djqueue.storage.claim_engines); this module
adds what is the same everywhere: the lease, the resume point of a draining
receiver, the worker's acks in the claim's transaction, promotion of due
messages when a claim comes up short, and the trace.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import DatabaseError, DataError, IntegrityError
from django.db.models import Q
from django.utils import timezone

from djqueue import signals
from djqueue.conf import get_settings
from djqueue.exceptions import InvalidCondition
from djqueue.models import Body, Event, Message, Queue, State
from djqueue.storage import dialects, fastpath, partitions, trace
from djqueue.storage.claim_engines import ROW_LOCKING, ClaimEngine, engine_for
from djqueue.storage.claim_limits import LimitWait, claim_limited
from djqueue.storage.claim_resume import ResumePoint, resume_points
from djqueue.storage.requeueing import promote_due
from djqueue.storage.statements.claim_statements import lock_ready, lock_ready_after, stamp_claimed
from djqueue.storage.transitions import ack_locked
from djqueue.types import AckHook

cache_queue = fastpath.related_cacher(Message, "queue")


def new_lease_token() -> str:
    return uuid.uuid4().hex


def ack_and_claim(
    acks: list[Message],
    queues: Sequence[Queue],
    limit: int,
    *,
    owner: str,
    visibility_timeout: float | None = None,
    where: Q | None = None,
    hook: AckHook | None = None,
    wait: LimitWait | None = None,
) -> tuple[list[Message], list[Message]]:
    """Ack ``acks`` (see ``ack_many``) and claim up to ``limit`` in one transaction, so a
    worker settles its finished batch and takes the next with a single commit.
    ``hook(db, acks, acked)`` runs in the ack (see lifecycle.ack_locked). ``wait``
    learns how soon a limited queue may let more start (see claim_limits).
    Returns (acked, claimed)."""
    db = dialects.alias()
    conn = dialects.connection()
    engine = engine_for(conn)
    token = new_lease_token()
    now = timezone.now()

    ends: list[_ClaimEnd] = []

    def work() -> tuple[list[Message], list[Message]]:
        ends.clear()
        with dialects.claim_isolation(conn), dialects.short_transaction(db):
            acked = ack_locked(db, acks, now, hook) if acks else []
            claimed: list[Message] = []
            limiters_locked = 0
            for queue in queues:
                want = limit - len(claimed)
                if want <= 0:
                    break
                def take(queue: Queue, n: int) -> list[Message]:
                    return _claim_queue(db, queue, n, engine=engine, owner=owner, token=token,
                                        now=now, where=where,
                                        visibility_timeout=visibility_timeout, ends=ends)

                if queue.limits_claims:
                    rows = claim_limited(
                        db, queue, want, engine=engine, stamp=_stamp(queue, owner, token, now,
                                                                     visibility_timeout),
                        where=where, wait=wait, first_lock=not limiters_locked, take=take)
                    limiters_locked += 1
                else:
                    rows = take(queue, want)
                _claimed_from(db, queue, rows, now)
                claimed += rows
        return acked, claimed

    acked, claimed = dialects.retry_deadlocks(work)
    for end in ends:  # committed: the next claim may continue where this one ended
        if end.full:
            resume_points.advance(db, end.queue_id, end.priority, end.last_id, end.since)
        else:
            resume_points.drop(db, end.queue_id)
    if acked:
        signals.messages_acked.send(sender=Message, messages=acked)
    attach_bodies(db, claimed)
    return acked, claimed


def ack_all(acks: list[Message], *, owner: str, hook: AckHook | None = None) -> list[Message]:
    """:func:`ack_and_claim` of ``acks`` alone, a transaction on each database they are on."""
    acked: list[Message] = []
    for db, (_, group) in by_database([], acks).items():
        with dialects.using(db):
            acked += ack_and_claim(group, [], 0, owner=owner, hook=hook)[0]
    return acked


class _ClaimEnd(NamedTuple):
    queue_id: int
    full: bool
    priority: int
    last_id: int
    since: ResumePoint | None


def _stamp(queue: Queue, owner: str, token: str, now: datetime,
           visibility_timeout: float | None) -> _Stamp:
    return _Stamp(owner, token, now + timedelta(
        seconds=visibility_timeout or queue.lease_seconds()), now)


def _claimed_from(db: str, queue: Queue, rows: list[Message], now: datetime) -> None:
    for message in rows:
        cache_queue(message, queue)
    if rows:
        trace.record(db, rows, Event.CLAIMED, at=now, queue_id=queue.pk)


def _claim_queue(db: str, queue: Queue, want: int, *, engine: ClaimEngine, owner: str,
                 token: str, now: datetime, where: Q | None,
                 visibility_timeout: float | None, ends: list[_ClaimEnd]) -> list[Message]:
    stamp = _stamp(queue, owner, token, now, visibility_timeout)
    if engine.resumes_claims and where is None and queue.group_holders is None:
        rows = _claim_resuming(db, queue, want, stamp, ends)
    else:
        rows = engine.claim(db, queue, want, stamp, where)
    if not rows:
        return []
    if engine.resumes_claims:  # the rows were read before the UPDATE stamped them
        for message in rows:
            message.state, message.owner, message.lease_token = State.CLAIMED, owner, token
            message.visible_at, message.claimed_at = stamp.lease_end, now
            message.attempts += 1
    return rows


def _claim_resuming(db: str, queue: Queue, want: int, stamp: _Stamp,
                    ends: list[_ClaimEnd]) -> list[Message]:
    """Lock and stamp the next ``want`` ready messages, continuing after this process's
    last full claim of the queue where that is allowed (see claim_resume)."""
    if not dialects.continues_claims(dialects.connection()):
        return ROW_LOCKING.claim(db, queue, want, stamp, None)
    since = resume_points.get(db, queue.pk)
    rows: list[Message] = []
    if since is not None:
        rows = lock_ready_after(db, queue.pk, since.priority, since.last_id, want)
    if len(rows) < want:  # from the head: it finds the rows just locked again, or earlier ones
        since, rows = None, lock_ready(db, queue.pk, want)
    last = rows[-1] if rows else None
    ends.append(_ClaimEnd(queue.pk, len(rows) == want, last.priority if last else 0,
                          last.pk if last else 0, since))
    if rows:
        stamp_claimed(db, [m.pk for m in rows], owner=stamp.owner, token=stamp.token,
                      lease_end=stamp.lease_end, now=stamp.now)
    return rows


class _Stamp(NamedTuple):
    owner: str
    token: str
    lease_end: datetime
    now: datetime


def attach_bodies(db: str, messages: Sequence[Message]) -> None:
    """Load the stored bodies of topic deliveries in one query."""
    ids = {m.stored_body_id for m in messages if m.stored_body_id is not None}
    if not ids:
        return
    bodies = Body.objects.using(db).in_bulk(list(ids))
    for message in messages:
        if message.stored_body_id is not None:
            message.stored_body = bodies[message.stored_body_id]


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


def by_database(queues: Sequence[Queue], acks: Sequence[Message],
                ) -> dict[str, tuple[list[Queue], list[Message]]]:
    """The queues and acks of each database (djqueue.storage.placement), in the order of
    the queues (databases with acks alone last); {} when there are neither."""
    found: dict[str, tuple[list[Queue], list[Message]]] = {}
    for queue in queues:
        found.setdefault(fastpath.database_of(queue) or dialects.alias(), ([], []))[0].append(
            queue)
    for message in acks:
        found.setdefault(fastpath.database_of(message) or dialects.alias(), ([], []))[1].append(
            message)
    return found


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
        acked, messages = ack_and_claim(acks, active, limit, owner=owner,
                                        visibility_timeout=visibility_timeout, where=where,
                                        hook=hook, wait=wait)
    if len(messages) < limit and clock.due(dialects.alias()) and promote_due(
            [q.pk for q in active]):
        messages += ack_and_claim([], active, limit - len(messages), owner=owner,
                                  visibility_timeout=visibility_timeout, where=where,
                                  wait=wait)[1]
    return acked, messages


def _any_ready(queues: Sequence[Queue], where: Q | None) -> bool:
    """A plain indexed read: an idle receiver's poll costs one statement, not a transaction."""
    ready = Message.objects.using(dialects.alias()).filter(
        queue_id__in=[q.pk for q in queues], state=State.READY)
    return (ready.filter(where) if where is not None else ready).exists()
