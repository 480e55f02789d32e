"""Claiming ready messages: one short transaction per batch, acks riding along.

The statements differ per database (djqueue.storage.claim_engines); this module
adds what is the same everywhere: the lease, the resume point of a draining
receiver, the worker's acks in the claim's transaction, and the trace. A
receiver's round over its queues and their databases, with promotion of due
messages when a claim comes up short, is djqueue.storage.receiver_claims.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db.models import Q

from djqueue import signals
from djqueue.models import Body, Event, Message, Queue, State
from djqueue.rates import LimitWait
from djqueue.storage import dialects, fastpath, host_clock, trace, unreadable_messages
from djqueue.storage.claim_engines import ROW_LOCKING, ClaimEngine, Stamp, engine_for
from djqueue.storage.claim_limits import claim_limited
from djqueue.storage.claim_resume import ResumePoint, resume_points
from djqueue.storage.statements.claim_statements import lock_ready, lock_ready_after, stamp_claimed
from djqueue.storage.transitions import ack_locked
from djqueue.storage.unreadable_rows import UNREADABLE, without_times
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
    now = host_clock.database_now(db)

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
                def take(queue: Queue, n: int, at: datetime = now) -> list[Message]:
                    return _claim_queue(db, queue, n, engine=engine, owner=owner, token=token,
                                        now=at, where=where,
                                        visibility_timeout=visibility_timeout, ends=ends)

                if queue.limits_claims:
                    rows = claim_limited(
                        db, queue, want, engine=engine, stamp=_stamp(queue, owner, token, now,
                                                                     visibility_timeout),
                        where=where, wait=wait, first_lock=not limiters_locked, take=take)
                    limiters_locked += 1
                else:
                    rows = take(queue, want)
                _claimed_from(db, queue, rows)
                claimed += rows
        return acked, claimed

    try:
        acked, claimed = dialects.retry_deadlocks(work)
    except UNREADABLE:
        # A row no driver reads back failed the claim: dead-letter it, claim again from
        # the head of each queue, which is where the rows set aside were looked for
        if conn.in_atomic_block or not unreadable_messages.set_aside(db, queues, limit):
            raise
        for queue in queues:
            resume_points.drop(db, queue.pk)
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


def ack_on(db: str, acks: list[Message], *, owner: str,
           hook: AckHook | None = None) -> list[Message]:
    """:func:`ack_and_claim` of ``acks`` alone, all on database ``db``: one transaction
    there. Returns those acked (a message whose lease was lost is not)."""
    with dialects.using(db):
        return ack_and_claim(acks, [], 0, owner=owner, hook=hook)[0]


class _ClaimEnd(NamedTuple):
    queue_id: int
    full: bool
    priority: int
    last_id: int
    since: ResumePoint | None


def _stamp(queue: Queue, owner: str, token: str, now: datetime,
           visibility_timeout: float | None) -> Stamp:
    return Stamp(owner, token, now + timedelta(
        seconds=visibility_timeout or queue.lease_seconds()), now)


def _claimed_from(db: str, queue: Queue, rows: list[Message]) -> None:
    """Each row knows its queue; a traced queue logs the claim at the claim's stamp,
    which every row of a claim shares (a limited claim's is the limiter's clock
    reading, see claim_limits, not the time the claim began)."""
    for message in rows:
        cache_queue(message, queue)
    if rows:
        trace.record(db, rows, Event.CLAIMED, at=rows[0].claimed_at, queue_id=queue.pk)


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


def _claim_resuming(db: str, queue: Queue, want: int, stamp: Stamp,
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


def attach_bodies(db: str, messages: Sequence[Message]) -> None:
    """Load the stored bodies of topic deliveries in one query, without their publication
    time, which a delivery never reads: one a hand edit left unreadable failed every
    claim of the queues holding its deliveries (djqueue.storage.unreadable_rows)."""
    ids = {m.stored_body_id for m in messages if m.stored_body_id is not None}
    if not ids:
        return
    bodies = without_times(Body.objects.using(db)).in_bulk(list(ids))
    for message in messages:
        if message.stored_body_id is not None:
            message.stored_body = bodies[message.stored_body_id]


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
