"""Deduplicated sends: a second send of a taken key returns the first message.

The key row is upserted first, which takes its exclusive lock in one
statement (whether the row existed or not), so concurrent senders of one key
queue up on it: the first inserts the message, the others then read its id.
No check-then-insert window exists.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q

from djqueue.exceptions import InvalidMessage, shown_value
from djqueue.models import PENDING_STATES, DedupKey, History, Message, Queue
from djqueue.storage import host_clock
from djqueue.storage.payloads import unstorable
from djqueue.storage.statements import vendor_sql
from djqueue.storage.unreadable_rows import UNREADABLE, first_row

MAX_KEY_CHARS = 200


def validate_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
        raise InvalidMessage(
            f"dedup_key must be a non-empty string of at most {MAX_KEY_CHARS} characters, "
            f"got {shown_value(key)}.")
    why = unstorable(key)
    if why is not None:
        raise InvalidMessage(f"dedup_key {why}.")
    return key


def take(db: str, queue: Queue, key: str) -> Message | History | None:
    """Lock ``key``; return the message holding it, or None if the caller may use it.

    Call inside the sending transaction, then :func:`assign` once the message exists.
    """
    DedupKey.objects.using(db).bulk_create(
        [DedupKey(queue=queue, key=key, message_id=0)],
        **vendor_sql.upsert_options(["queue", "key"], ["key"]))
    try:
        message_id, expires_at = DedupKey.objects.using(db).filter(
            queue=queue, key=key).values_list("message_id", "expires_at").get()
    except UNREADABLE:
        # A window's end a hand edit left unreadable counts as passed: the caller
        # takes the key over, and assign() writes a time that reads.
        return None
    if message_id == 0:
        return None
    # An original whose time a hand edit left unreadable is the duplicate's answer all
    # the same, that time None.
    if expires_at is not None:
        if expires_at <= host_clock.database_now(db):
            return None
        return (first_row(Message.objects.using(db).filter(pk=message_id))
                or first_row(History.objects.using(db).filter(pk=message_id)))
    return first_row(Message.objects.using(db).filter(pk=message_id, state__in=PENDING_STATES))


def assign(db: str, queue: Queue, key: str, message: Message) -> None:
    now = host_clock.database_now(db)
    window = queue.dedup_seconds()
    expires = now + timedelta(seconds=window) if window is not None else None
    DedupKey.objects.using(db).filter(queue=queue, key=key).update(
        message_id=message.pk, created_at=now, expires_at=expires)


def prune(db: str, now: datetime | None = None, batch: int = 5000) -> int:
    """Delete keys that no longer hold: expired windows, and (without a window) keys
    whose message is no longer pending."""
    now = now or host_clock.database_now(db)
    removed = 0
    expired = list(DedupKey.objects.using(db).filter(expires_at__lte=now)
                   .values_list("pk", flat=True)[:batch])
    if expired:
        removed += DedupKey.objects.using(db).filter(pk__in=expired, expires_at__lte=now).delete()[0]
    candidates = dict(DedupKey.objects.using(db).filter(expires_at__isnull=True)
                      .exclude(message_id=0).values_list("pk", "message_id")[:batch])
    if candidates:
        live = set(Message.objects.using(db).filter(
            pk__in=list(candidates.values()), state__in=PENDING_STATES)
            .values_list("pk", flat=True))
        gone = [(pk, mid) for pk, mid in candidates.items() if mid not in live]
        for start in range(0, len(gone), 500):
            # Why match the message id too: a sender may have taken the key over
            # for a new message since it was read.
            match = Q()
            for pk, mid in gone[start:start + 500]:
                match |= Q(pk=pk, message_id=mid)
            removed += DedupKey.objects.using(db).filter(match, expires_at__isnull=True).delete()[0]
    return removed
