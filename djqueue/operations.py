"""Operating on queues: redrive, purge, inspect and delete without claiming."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Case, Exists, F, OuterRef, Value, When
from django.utils import timezone

from djqueue import dedup, groups, signals, trace, vendor
from djqueue.conf import get_settings
from djqueue.exceptions import InvalidMessage
from djqueue.lifecycle import history_row
from djqueue.models import Event, History, Message, Outcome, State
from djqueue.queues import QueueRef, get_queue


def redrive(dead_letter_queue: QueueRef, to: QueueRef | None = None,
            limit: int | None = None) -> int:
    """Move dead messages of ``dead_letter_queue`` back to ``to`` (default: where each failed).

    They become ready with a fresh attempt count; their errors are kept.
    """
    source = get_queue(dead_letter_queue, fresh=True)
    target = get_queue(to, fresh=True) if to is not None else None
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidMessage(f"limit must be a positive integer, got {limit!r}.")
    db = vendor.alias()
    moved = 0
    batch = get_settings().PRUNE_BATCH
    while limit is None or moved < limit:
        take = batch if limit is None else min(batch, limit - moved)
        with transaction.atomic(using=db):
            ids = _lock_ids(Message.objects.using(db).filter(queue=source, state=State.DEAD)
                            .order_by("id"), take)
            if not ids:
                break
            destination = (Value(target.pk) if target is not None else Case(
                When(origin_queue__isnull=False, then=F("origin_queue")), default=Value(source.pk)))
            Message.objects.using(db).filter(pk__in=ids).update(
                queue=destination, state=State.READY, attempts=0, owner="", lease_token="",
                visible_at=timezone.now())
            groups.rejoin(db, ids)
            moved_rows = list(Message.objects.using(db).filter(pk__in=ids)
                              .only("pk", "queue_id", "attempts", "owner"))
            trace.record(db, moved_rows, Event.REDRIVEN, also_queue_id=source.pk,
                         detail=f"from queue {source.name}")
        moved += len(ids)
        if len(ids) < take:
            break
    if moved:
        signals.messages_redriven.send(sender=Message, queue=source, count=moved)
    return moved


def purge(queue: QueueRef) -> int:
    """Delete the queue's ready, scheduled, waiting and dead messages; in-flight ones
    finish normally."""
    q = get_queue(queue, fresh=True)
    db = vendor.alias()
    removed = 0
    batch = get_settings().PRUNE_BATCH
    while True:
        with transaction.atomic(using=db):
            ids = _lock_ids(Message.objects.using(db).filter(
                queue=q, state__in=[State.READY, State.SCHEDULED, State.WAITING, State.DEAD]),
                batch)
            if ids:
                Message.objects.using(db).filter(pk__in=ids).delete()
                trace.record(db, [Message(pk=pk, queue_id=q.pk) for pk in ids], Event.PURGED)
        removed += len(ids)
        if len(ids) < batch:
            break
    if q.ordered:
        with transaction.atomic(using=db):
            groups.repair(db, [q.pk])
    return removed


def _lock_ids(query, limit: int) -> list[int]:
    """Ids of up to ``limit`` rows of ``query``, locked, skipping rows others hold.

    Why by id: deleting and updating by primary key keeps MySQL's locks to the
    rows themselves (by a secondary key it also locks gaps and deadlocks).
    """
    if vendor.claims_by_skip_locked():
        query = query.select_for_update(skip_locked=True)
    return list(query.values_list("pk", flat=True)[:limit])


def get_message(message_id: int) -> Message | None:
    """A pending or dead message by id, without claiming it."""
    return Message.objects.using(vendor.alias()).filter(pk=message_id).first()


def peek(queue: QueueRef | None = None, *, state: State | None = None,
         older_than: float | timedelta | None = None, limit: int = 100) -> list[Message]:
    """Messages matching the filters, oldest first, without claiming them."""
    query = Message.objects.using(vendor.alias()).order_by("id")
    if queue is not None:
        query = query.filter(queue=get_queue(queue))
    if state is not None:
        query = query.filter(state=State(state))
    if older_than is not None:
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
        query = query.filter(sent_at__lte=timezone.now() - timedelta(seconds=seconds))
    return list(query[:limit])


def delete(message: Message | int, *, only_unclaimed: bool = False) -> bool:
    """Remove a message directly; history records it as deleted.

    With ``only_unclaimed`` a message some receiver holds is left alone (False).
    """
    pk = message.pk if isinstance(message, Message) else message
    db = vendor.alias()
    with transaction.atomic(using=db):
        row = Message.objects.using(db).select_for_update().filter(pk=pk).first()
        if row is None or (only_unclaimed and row.state == State.CLAIMED):
            return False
        History.objects.using(db).bulk_create([history_row(row, Outcome.DELETED, timezone.now())])
        row.delete(using=db)
        groups.hand_on(db, [row])
        trace.record(db, [row], Event.DELETED)
    return True


def finished(message_id: int) -> History | None:
    return History.objects.using(vendor.alias()).filter(pk=message_id).first()


def prune_history(now: datetime | None = None) -> int:
    """Delete what is past retention, in batches by primary key: history (per queue's
    retention), finished task results and periodic ticks (RESULT_RETENTION)."""
    from djqueue.models import (
        FINISHED_STATUSES,
        MessageGroup,
        PeriodicTick,
        Queue,
        TaskRecord,
        TraceEvent,
    )
    from djqueue.topics import collect_bodies

    db = vendor.alias()
    now = now or timezone.now()
    removed = 0
    for queue_id, retention in Queue.objects.using(db).values_list("pk", "retention"):
        cutoff = now - timedelta(seconds=retention)
        removed += _delete_in_batches(History.objects.using(db).filter(
            queue_id=queue_id, finished_at__lt=cutoff))
        removed += _delete_in_batches(TraceEvent.objects.using(db).filter(
            queue_id=queue_id, at__lt=cutoff))
        removed += _delete_in_batches(MessageGroup.objects.using(db).filter(
            queue_id=queue_id, touched_at__lt=cutoff).exclude(
            Exists(Message.objects.filter(queue_id=OuterRef("queue_id"),
                                          group_key=OuterRef("key")))))
    removed += dedup.prune(db, now)
    removed += collect_bodies(now)
    cutoff = now - timedelta(seconds=get_settings().RESULT_RETENTION)
    removed += _delete_in_batches(TaskRecord.objects.using(db).filter(
        status__in=FINISHED_STATUSES, finished_at__lt=cutoff))
    removed += _delete_in_batches(PeriodicTick.objects.using(db).filter(tick_at__lt=cutoff))
    return removed


def _delete_in_batches(query) -> int:
    batch = get_settings().PRUNE_BATCH
    removed = 0
    while True:
        ids = list(query.values_list("pk", flat=True)[:batch])
        if ids:
            query.model.objects.using(query.db).filter(pk__in=ids).delete()
        removed += len(ids)
        if len(ids) < batch:
            return removed
