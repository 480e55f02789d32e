"""Ready messages whose row a claim cannot read, dead-lettered so their queue flows.

A hand edit or another tool can leave a time no driver reads back: PostgreSQL's
``'infinity'``, MariaDB's zero date, text on SQLite that is no date. A claim reads its
rows in one statement, so one such row at the head of a queue failed every claim of
every receiver there, and a worker left the whole database for a while at each failure:
nothing in the queue was delivered, finished or dead-lettered.

When a claim fails so (djqueue.storage.unreadable_rows.UNREADABLE), the ready messages it would have read next
are read again through the claim's own statement, in one statement and, if that fails,
one at a time; each that cannot be
read is dead-lettered with the reading's error (as a message failing its last attempt
is), its times set to the moment it was set aside, so its dead-letter queue can read it.
Then the claim runs again. The reaper's return of expired leases and dead workers'
claims does the same with the claimed rows it could not read. Nothing here runs
while claims and returns succeed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from djqueue.models import Message, Queue, State
from djqueue.storage import dialects, host_clock
from djqueue.storage.statements import claim_statements
from djqueue.storage.transitions import record_failure
from djqueue.storage.unreadable_rows import UNREADABLE, times_of

logger = logging.getLogger("djqueue.claims")

#: Ready messages at a queue's head that other claims may hold, looked at beyond a claim's.
HELD_ELSEWHERE = 100
_TIMES = times_of(Message)
_READABLE = tuple(f.attname for f in Message._meta.concrete_fields if f.attname not in _TIMES)


def set_aside(db: str, queues: Sequence[Queue], limit: int) -> int:
    """Dead-letter the unreadable among the ready messages at the head of each of
    ``queues`` on ``db``, each in a short transaction of its own; how many. The head is
    ``limit`` messages and as many again, with room for those other claims hold (a
    claim skips them): what the claim run again from the head reads."""
    return sum(dead_letter_unreadable(db, Message.objects.using(db).filter(
        queue_id=queue.pk, state=State.READY).claim_order().values_list(
            "pk", flat=True)[:2 * limit + HELD_ELSEWHERE], State.READY) for queue in queues)


def dead_letter_unreadable(db: str, ids: Iterable[int], state: State) -> int:
    """Dead-letter those of the messages ``ids`` in ``state`` that cannot be read, each in a
    short transaction of its own; how many (the reaper's return of claims uses it too).
    They are read in one statement first: when all read (the claim failed for another
    reason, a condition that cannot be evaluated, say), that is all it costs."""
    ids = list(ids)
    try:
        if ids:
            claim_statements.read_by_ids(db, ids)
        return 0
    except UNREADABLE:
        pass
    set_aside = 0
    for message_id in ids:
        try:
            claim_statements.read_by_ids(db, [message_id])
        except UNREADABLE as exc:
            set_aside += _dead_letter(db, message_id, state, exc)
    return set_aside


def _dead_letter(db: str, message_id: int, state: State, exc: Exception) -> int:
    now = host_clock.database_now(db)
    with dialects.short_transaction(db):
        rows = Message.objects.using(db).select_for_update(skip_locked=True).filter(
            pk=message_id, state=state)
        row = rows.only(*_READABLE).first()
        if row is None:  # changed, or set aside by another process, meanwhile
            return 0
        rows.update(**{name: now for name in _TIMES if name != "claimed_at"}, claimed_at=None)
        for name in _TIMES:
            setattr(row, name, now if name != "claimed_at" else None)
        error = (f"its row could not be read ({type(exc).__name__}: {exc}); its times are "
                 f"those of the moment it was set aside")
        record_failure(row, error, now, give_up=True)
    logger.error("Message %s on %s could not be read and was dead-lettered: %s", message_id,
                 db, exc, extra={"message_id": message_id, "database": db})
    return 1
