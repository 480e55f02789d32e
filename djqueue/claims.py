"""Claiming ready messages: one short transaction per batch.

MariaDB/MySQL and PostgreSQL::

    SELECT ... FROM djqueue_message
     WHERE queue_id = %s AND state = 1          -- READY
     ORDER BY priority DESC, id LIMIT %s
       FOR UPDATE SKIP LOCKED;                   -- index djqueue_msg_claim
    UPDATE djqueue_message SET state = 3, owner = %s, lease_token = %s,
           visible_at = %s, claimed_at = %s, attempts = attempts + 1
     WHERE id IN (...);

SQLite (no row locks; writers are serialised)::

    UPDATE djqueue_message SET ... WHERE id IN (SELECT id ... LIMIT %s);
    SELECT ... WHERE state = 3 AND lease_token = %s;
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import DataError, IntegrityError
from django.db.models import F, Q
from django.utils import timezone

from djqueue import signals, trace, vendor
from djqueue.claim_cursor import Cursor, cursors
from djqueue.claim_rows import lock_ready, lock_ready_after, stamp_claimed
from djqueue.conf import get_settings
from djqueue.exceptions import InvalidCondition
from djqueue.handlers import AckHook
from djqueue.lifecycle import ack_locked, promote_due
from djqueue.models import Body, Event, Message, Queue, State

cache_queue = Message.queue.field.set_cached_value


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
) -> tuple[list[Message], list[Message]]:
    """Ack ``acks`` (see ``ack_many``) and claim up to ``limit`` in one transaction, so a
    worker settles its finished batch and takes the next with a single commit.
    ``hook(db, acks, acked)`` runs in the ack (see lifecycle.ack_locked).
    Returns (acked, claimed)."""
    db = vendor.alias()
    conn = vendor.connection()
    skip_locked = vendor.claims_by_skip_locked(conn)
    token = new_lease_token()
    now = timezone.now()

    ends: list[_ClaimEnd] = []

    def work() -> tuple[list[Message], list[Message]]:
        ends.clear()
        with vendor.claim_isolation(conn), vendor.short_transaction(db):
            acked = ack_locked(db, acks, now, hook) if acks else []
            claimed: list[Message] = []
            for queue in queues:
                want = limit - len(claimed)
                if want <= 0:
                    break
                claimed += _claim_queue(db, queue, want, skip_locked=skip_locked, owner=owner,
                                        token=token, now=now, where=where,
                                        visibility_timeout=visibility_timeout, ends=ends)
        return acked, claimed

    acked, claimed = vendor.retry_deadlocks(work)
    for end in ends:  # committed: the next claim may continue where this one ended
        if end.full:
            cursors.advance(db, end.queue_id, end.priority, end.last_id, end.since)
        else:
            cursors.drop(db, end.queue_id)
    if acked:
        signals.messages_acked.send(sender=Message, messages=acked)
    attach_bodies(db, claimed)
    return acked, claimed


class _ClaimEnd(NamedTuple):
    queue_id: int
    full: bool
    priority: int
    last_id: int
    since: Cursor | None


def _claim_queue(db: str, queue: Queue, want: int, *, skip_locked: bool, owner: str,
                 token: str, now: datetime, where: Q | None,
                 visibility_timeout: float | None, ends: list[_ClaimEnd]) -> list[Message]:
    lease_end = now + timedelta(seconds=visibility_timeout or queue.visibility_timeout)
    stamp = {"state": State.CLAIMED, "owner": owner, "lease_token": token,
             "visible_at": lease_end, "claimed_at": now}
    if skip_locked:
        rows = _lock_ready(db, queue, want, where, ends)
        if not rows:
            return []
        stamp_claimed(db, [m.pk for m in rows], owner=owner, token=token,
                      lease_end=lease_end, now=now)
        for message in rows:
            _stamp(message, stamp, attempts=message.attempts + 1)
    else:
        ready = Message.objects.using(db).filter(queue=queue, state=State.READY)
        if where is not None:
            ready = ready.filter(where)
        ready = ready.claim_order().values("pk")[:want]
        count = Message.objects.using(db).filter(pk__in=ready).update(
            attempts=F("attempts") + 1, **stamp)
        if not count:
            return []
        rows = list(Message.objects.using(db).filter(
            state=State.CLAIMED, lease_token=token, queue=queue).claim_order())
    for message in rows:
        cache_queue(message, queue)
    trace.record(db, rows, Event.CLAIMED, at=now, queue_id=queue.pk)
    return rows


def _lock_ready(db: str, queue: Queue, want: int, where: Q | None,
                ends: list[_ClaimEnd]) -> list[Message]:
    """Lock the next ``want`` ready messages, continuing after this process's last full
    claim of the queue where that is allowed (see djqueue.claim_cursor)."""
    if where is not None or queue.ordered or not vendor.continues_claims(
            vendor.connection()):
        return lock_ready(db, queue.pk, want, where)
    since = cursors.get(db, queue.pk)
    rows: list[Message] = []
    if since is not None:
        rows = lock_ready_after(db, queue.pk, since.priority, since.last_id, want)
    if len(rows) < want:  # from the head: it finds the rows just locked again, or earlier ones
        since, rows = None, lock_ready(db, queue.pk, want)
    last = rows[-1] if rows else None
    ends.append(_ClaimEnd(queue.pk, len(rows) == want, last.priority if last else 0,
                          last.pk if last else 0, since))
    return rows


def attach_bodies(db: str, messages: Sequence[Message]) -> None:
    """Load the stored bodies of topic deliveries in one query."""
    ids = {m.stored_body_id for m in messages if m.stored_body_id is not None}
    if not ids:
        return
    bodies = Body.objects.using(db).in_bulk(list(ids))
    for message in messages:
        if message.stored_body_id is not None:
            message.stored_body = bodies[message.stored_body_id]


def _stamp(message: Message, stamp: dict[str, object], attempts: int) -> None:
    for name, value in stamp.items():
        setattr(message, name, value)
    message.attempts = attempts


class PromotionClock:
    """Lets one receiving loop promote due scheduled messages at most once a PROMOTE_INTERVAL."""

    def __init__(self) -> None:
        self.last = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < get_settings().PROMOTE_INTERVAL:
            return False
        self.last = now
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
) -> tuple[list[Message], list[Message]]:
    """Claim from the unpaused ``queues``; if that comes up short, promote due scheduled
    messages (throttled by ``clock``) and claim the rest. ``peek`` (for a receiver
    that found nothing last time) checks for ready messages before opening a claim.
    ``acks`` are acked in the first transaction, ``hook`` running in the ack (see
    :func:`ack_and_claim`). Returns (acked, claimed)."""
    acks = acks or []
    active = [q for q in queues if not q.paused]
    if not active:
        return ack_and_claim(acks, [], 0, owner=owner, hook=hook) if acks else ([], [])
    try:
        return _claim_ready(acks, active, limit, owner=owner,
                            visibility_timeout=visibility_timeout, clock=clock, where=where,
                            peek=peek, hook=hook)
    except (DataError, IntegrityError) as exc:
        if where is None:
            raise
        # Why IntegrityError too: Django's MySQL backend reports error 1690
        # (arithmetic out of range) as one; a claim writes no constrained column.
        raise InvalidCondition(f"The condition cannot be evaluated ({exc})", 1, "") from None


def _claim_ready(acks: list[Message], active: Sequence[Queue], limit: int, *, owner: str,
                 visibility_timeout: float | None, clock: PromotionClock,
                 where: Q | None, peek: bool,
                 hook: AckHook | None) -> tuple[list[Message], list[Message]]:
    acked: list[Message] = []
    messages: list[Message] = []
    if acks or not peek or _any_ready(active, where):
        acked, messages = ack_and_claim(acks, active, limit, owner=owner,
                                        visibility_timeout=visibility_timeout, where=where,
                                        hook=hook)
    if len(messages) < limit and clock.due() and promote_due([q.pk for q in active]):
        messages += ack_and_claim([], active, limit - len(messages), owner=owner,
                                  visibility_timeout=visibility_timeout, where=where)[1]
    return acked, messages


def _any_ready(queues: Sequence[Queue], where: Q | None) -> bool:
    """A plain indexed read: an idle receiver's poll costs one statement, not a transaction."""
    ready = Message.objects.using(vendor.alias()).filter(
        queue_id__in=[q.pk for q in queues], state=State.READY)
    return (ready.filter(where) if where is not None else ready).exists()
