"""Messages made ready again without their receiver, by the reaper (and by a worker's
claim for due ones): the claims of dead workers and of expired leases, each counted as
a failed delivery, and scheduled messages whose time has come.

Rows are locked with SKIP LOCKED: a row another transaction holds (an exactly-once
handler still running, another reaper) is left to the next pass.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet

from djqueue.models import Message, State
from djqueue.storage import dialects, host_clock
from djqueue.storage.claim_engines import SERIAL, engine_for
from djqueue.storage.claim_resume import ready_again
from djqueue.storage.transitions import record_failure
from djqueue.storage.unreadable_messages import dead_letter_unreadable
from djqueue.storage.unreadable_rows import UNREADABLE


def return_claims(rows_query: QuerySet[Message], error: str, limit: int) -> int:
    """Lock up to ``limit`` claimed rows of ``rows_query`` and count each as a failed delivery.

    Used by the reaper for expired leases and for the claims of dead workers;
    rows another transaction holds (an exactly-once handler still running) are
    skipped. Returned messages are ready again at once.
    """
    db = dialects.alias()

    def returning() -> int:
        now = host_clock.database_now(db)
        with dialects.claim_isolation(), transaction.atomic(using=db):
            query = engine_for().skipping_locked(rows_query.using(db).order_by("visible_at"))
            rows = list(query[:limit])
            # By queue: each queue's statistics rows are then locked in the order every
            # other transaction locks them (stat_counters), and no two wait in a circle.
            for row in sorted(rows, key=lambda r: (r.queue_id, r.pk)):
                record_failure(row, error.format(owner=row.owner or "unknown"), now,
                               retry_delay=0)
        return len(rows)

    try:
        return dialects.retry_deadlocks(returning)
    except UNREADABLE:  # a row no driver reads back: dead-letter it, return the others
        ids = rows_query.using(db).order_by("visible_at").values_list("pk", flat=True)[:limit]
        if (dialects.connection().in_atomic_block
                or not dead_letter_unreadable(db, ids, State.CLAIMED)):
            raise
        return dialects.retry_deadlocks(returning)


def promote_due(queue_ids: list[int] | None = None, limit: int = 1000) -> int:
    """Make scheduled messages whose time has come ready; returns how many."""
    db = dialects.alias()
    due = Message.objects.using(db).due(host_clock.database_now(db))
    if queue_ids is not None:
        due = due.filter(queue_id__in=queue_ids)
    if engine_for() is SERIAL:  # one UPDATE: nothing to lock, no one to skip
        return ready_again(Message.objects.using(db).filter(pk__in=due.values("pk")[:limit]),
                           state=State.READY)
    if not due.exists():  # one cheap read instead of a transaction, the usual idle case
        return 0
    with dialects.claim_isolation(), transaction.atomic(using=db):
        ids = list(due.select_for_update(skip_locked=True).values_list("pk", flat=True)[:limit])
        if not ids:
            return 0
        return ready_again(Message.objects.using(db).filter(pk__in=ids, state=State.SCHEDULED),
                           state=State.READY)
