"""Message trace (a stream queue's): what happened to a message, step by step.

Events are written in the same transaction as the state change they record,
only for queues with ``trace`` on, and pruned with the queue's retention.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from djqueue.exceptions import InvalidMessage, given_id
from djqueue.models import Event, Message, TraceEvent
from djqueue.storage import dialects, host_clock
from djqueue.storage.queue_lookup import get_queue_by_id
from djqueue.storage.unreadable_rows import read_rows

MAX_DETAIL_CHARS = 2000


def traced(queue_id: int | None, db: str | None = None) -> bool:
    return queue_id is not None and get_queue_by_id(queue_id, db).trace


def record(db: str, messages: Iterable[Message], event: Event, *, detail: str = "",
           queue_id: int | None = None, at: datetime | None = None,
           also_queue_id: int | None = None) -> None:
    """Log ``event`` for those of ``messages`` whose queue traces.

    ``queue_id`` overrides the message's queue; ``also_queue_id`` names a second
    queue whose ``trace`` also counts (a move between queues).
    """
    also = traced(also_queue_id, db)
    tracing: dict[int, bool] = {}  # one lookup per queue, not per message
    rows = []
    for message in messages:
        qid = queue_id if queue_id is not None else message.queue_id
        if qid not in tracing:
            tracing[qid] = also or traced(qid, db)
        if tracing[qid]:
            at = at or host_clock.database_now(db)
            rows.append(TraceEvent(
                message_id=message.pk, queue_id=qid, event=event, at=at,
                attempt=message.attempts or 0, worker=(message.owner or "")[:100],
                detail=detail[:MAX_DETAIL_CHARS]))
    if rows:
        TraceEvent.objects.using(db).bulk_create(rows)


def message_trace(message_id: int) -> list[TraceEvent]:
    """Every recorded event of a message, oldest first; an event's time None if a hand
    edit left it unreadable (djqueue.storage.unreadable_rows)."""
    given_id(message_id, InvalidMessage, "message_trace() takes a message id")
    return read_rows(TraceEvent.objects.using(dialects.alias()).filter(message_id=message_id)
                     .order_by("id"))
