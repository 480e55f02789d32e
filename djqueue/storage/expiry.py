"""Messages that expire: a message not delivered by its expiry is dead-lettered unrun.

What Celery's ``expires``, RabbitMQ's per-message TTL and SQS's retention give their
users: a password-reset mail or a price quote that is worth sending within minutes and
is harm after. ``send(..., expires=...)`` stamps the time in the message's headers,
under ``EXPIRES_HEADER`` (seconds since the epoch), where Celery keeps its own: no
column on the hot table, nothing to read for messages without one, and a client of the
HTTP API can set it as a header.

A claim sets expired messages aside before anyone runs them (:func:`set_aside_expired`,
after each claim of ``receiver_claims``, which claims again for the rest): each is
dead-lettered with an error that says when it
expired, and its expiry is dropped, so a redrive runs it (RabbitMQ drops a dead
letter's expiry too). On a queue with a ``message_ttl``, or whose head stood still,
the reaper also sets aside the expired messages at the head of the queue, where the
next claim would look (:func:`sweep_head`), so that a queue no worker serves does not
fill with them and hold its senders back at ``max_depth``: RabbitMQ drops expired
messages at a queue's head too. A queue whose workers keep up is left to its claims;
a claim that finds nothing but expired messages sweeps the head of their queue the
same way before it claims again.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from djqueue import durations
from djqueue.exceptions import InvalidMessage, shown_value
from djqueue.models import Message, State
from djqueue.storage import dialects
from djqueue.storage.transitions import record_failure
from djqueue.storage.unreadable_messages import dead_letter_unreadable
from djqueue.storage.unreadable_rows import UNREADABLE

#: The header that holds a message's expiry, in seconds since the epoch (UTC).
EXPIRES_HEADER = "djqueue-expires"


def with_expiry(headers: dict[str, Any] | None, expires: Any,
                visible_at: datetime) -> dict[str, Any] | None:
    """``headers`` with the expiry ``expires`` asks for: seconds or a timedelta after
    the message becomes visible (its send, or the end of its delay), or an aware
    datetime after that. A header already there (a client of the HTTP API sets it so)
    must be seconds since the epoch. InvalidMessage for anything else."""
    if headers is not None and EXPIRES_HEADER in headers:
        if expires is not None:
            raise InvalidMessage(f"Give expires= or the {EXPIRES_HEADER!r} header, not both.")
        stamp = headers[EXPIRES_HEADER]
        if (isinstance(stamp, bool) or not isinstance(stamp, int | float)
                or not math.isfinite(stamp)):
            raise InvalidMessage(f"The {EXPIRES_HEADER!r} header is seconds since the epoch, "
                                 f"got {shown_value(stamp)}.")
        _check_after(datetime.fromtimestamp(max(0.0, min(stamp, 1e11)), tz=UTC), visible_at)
        return headers
    if expires is None:
        return headers
    if isinstance(expires, datetime):
        if timezone.is_naive(expires):
            raise InvalidMessage("An expiry time must be timezone-aware.")
        at = expires
    else:
        seconds = expires.total_seconds() if isinstance(expires, timedelta) else expires
        try:
            seconds = durations.check(seconds, "expires", high=durations.MAX_RETENTION)
        except ValueError as error:
            raise InvalidMessage(f"{error} (A timedelta or an aware datetime will do too.)"
                                 ) from None
        at = visible_at + timedelta(seconds=seconds)
    _check_after(at, visible_at)
    return {**(headers or {}), EXPIRES_HEADER: round(at.timestamp(), 6)}


def _check_after(at: datetime, visible_at: datetime) -> None:
    if at <= visible_at:
        raise InvalidMessage(f"The message would expire at {at.isoformat()}, before it "
                             f"becomes visible at {visible_at.isoformat()}.")


def expires_at(message: Message) -> float | None:
    """The message's expiry in seconds since the epoch, or None (none, or a header that
    is not a number: a row written past the checks never stops a claim)."""
    return _stamp(message.headers)


def _stamp(headers: object) -> float | None:
    if not isinstance(headers, dict):
        return None
    stamp = headers.get(EXPIRES_HEADER)
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        return None
    return stamp


def set_aside_expired(db: str, claimed: list[Message], now: datetime) -> list[Message]:
    """The messages of a committed claim that have not expired; the expired ones are
    dead-lettered, unrun, in one transaction. Messages without headers cost one
    attribute test each."""
    if not any(m.headers for m in claimed):
        return claimed
    moment = now.timestamp()
    expired = [m for m in claimed if (stamp := expires_at(m)) is not None and stamp <= moment]
    if not expired:
        return claimed
    _dead_letter(db, expired, now)
    gone = {id(m) for m in expired}
    return [m for m in claimed if id(m) not in gone]


#: Messages at a queue's head that one round of :func:`sweep_head` looks at.
SWEEP_BATCH = 500
#: Rounds of :func:`sweep_head` in one reaper pass, while each round's messages all expired.
SWEEP_ROUNDS = 20


def sweep_head(db: str, queue_id: int, now: datetime) -> int:
    """Dead-letter the expired messages at the head of the queue, in claim order (what
    the next claim would reach), without a claim: rounds of SWEEP_BATCH messages while
    a round found nothing but expired messages. Each round reads the head's headers
    without a lock; only the expired rows are then locked (rows a worker holds are
    skipped), in a short transaction, so a served queue's claims are not held back.
    A row whose time no driver reads back is dead-lettered with the reading's error
    (djqueue.storage.unreadable_messages), so one hand edit does not stop the sweep.
    Returns how many were set aside."""
    moment, total = now.timestamp(), 0
    for _ in range(SWEEP_ROUNDS):
        with dialects.using(db):
            head = list(Message.objects.using(db).filter(
                queue_id=queue_id, state=State.READY).order_by("-priority", "id")
                .values_list("pk", "headers")[:SWEEP_BATCH])
        due = [pk for pk, headers in head
               if (stamp := _stamp(headers)) is not None and stamp <= moment]
        lock_and_set_aside = functools.partial(_lock_and_set_aside, db, due, now)
        try:
            set_aside = dialects.retry_deadlocks(lock_and_set_aside)
        except UNREADABLE:
            # A row a hand edit left unreadable fails the locking read of them all:
            # dead-letter it with the reading's error, then the rest with their expiry.
            unreadable = dead_letter_unreadable(db, due, State.READY)
            if not unreadable:
                raise
            set_aside = unreadable + dialects.retry_deadlocks(lock_and_set_aside)
        total += set_aside
        if len(head) < SWEEP_BATCH or set_aside < len(head):
            break
    return total


def _lock_and_set_aside(db: str, ids: list[int], now: datetime) -> int:
    """Set aside the messages ``ids`` still READY and past their expiry; those a worker
    holds locked are skipped."""
    if not ids:
        return 0
    moment, count = now.timestamp(), 0
    with dialects.using(db), transaction.atomic(using=db):
        for row in Message.objects.using(db).select_for_update(skip_locked=True).filter(
                pk__in=ids, state=State.READY):
            stamp = expires_at(row)
            if stamp is not None and stamp <= moment:
                _set_aside(db, row, stamp, now)
                count += 1
    return count


def _set_aside(db: str, row: Message, stamp: float, now: datetime) -> None:
    """On a locked row past its expiry ``stamp``: dead-letter it with its expiry as its
    error, and without the header, so that a redrive runs it."""
    headers = {k: v for k, v in (row.headers or {}).items() if k != EXPIRES_HEADER}
    Message.objects.using(db).filter(pk=row.pk).update(
        headers=headers or None, attempts=row.attempts)
    row.headers = headers or None
    at = datetime.fromtimestamp(max(0.0, stamp), tz=UTC)  # a -1e300 written by hand
    # MariaDB's driver reads a zero date written by hand as None.
    after = "" if row.sent_at is None else (
        f"{(now - row.sent_at).total_seconds():.3f} s after it was sent, ")
    record_failure(row, f"Expired at {at.isoformat()}, {after}before a delivery: not run.",
                   now, give_up=True)


def _dead_letter(db: str, expired: Sequence[Message], now: datetime) -> None:
    """Dead-letter the claimed ``expired`` messages, each with its expiry as its error
    and without the header, so that a redrive runs it."""
    def expiring() -> None:
        with dialects.using(db), transaction.atomic(using=db):
            rows = {m.pk: m for m in Message.objects.using(db).select_for_update().filter(
                pk__in=[m.pk for m in expired], state=State.CLAIMED)}
            for message in expired:
                row = rows.get(message.pk)
                if row is None or row.lease_token != message.lease_token:
                    continue  # not this claim's any more: whoever holds it decides
                stamp = expires_at(row)
                if stamp is None:
                    continue  # its expiry is no longer there: it is not expired
                # The claim counted a delivery that never happened: uncount it, so the
                # dead letter says how many runs the message really had.
                row.attempts = max(row.attempts - 1, 0)
                _set_aside(db, row, stamp, now)

    dialects.retry_deadlocks(expiring)
