"""Operating on queues: redrive, purge, inspect and delete without claiming."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Case, F, QuerySet, Value, When

from djqueue import durations, signals
from djqueue.api import ready_wakeups
from djqueue.api.message_ids import id_chunks, one_id
from djqueue.conf import get_settings
from djqueue.exceptions import InvalidMessage, given_id, shown_value
from djqueue.models import Event, History, Message, Outcome, State
from djqueue.storage import dialects, history_copy, host_clock, ordered_groups, partitions, placement, trace
from djqueue.storage.claim_engines import engine_for
from djqueue.storage.claim_resume import ready_again
from djqueue.storage.claims import attach_bodies
from djqueue.storage.queue_lookup import QueueRef, get_queue, get_queue_on
from djqueue.storage.unreadable_rows import first_row, read_rows

#: The longest visibility change allowed (SQS allows 12 hours).
MAX_VISIBILITY = 12 * 3600.0
#: The most messages one peek() returns.
MAX_PEEK = 10_000


def redrive(dead_letter_queue: QueueRef, to: QueueRef | None = None,
            limit: int | None = None, ids: list[int] | None = None) -> int:
    """Move dead messages of ``dead_letter_queue`` (only ``ids``, if given) back to
    ``to`` (default: where each failed).

    They become ready with a fresh attempt count; their errors are kept.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidMessage(f"limit must be a positive integer, got {shown_value(limit)}.")
    source = get_queue(dead_letter_queue, fresh=True)
    target = get_queue(to, fresh=True) if to is not None else None
    if source.partitions is not None:  # each partition's dead letters, where they are
        moved = 0
        for db in partitions.served(source):
            moved += redrive(get_queue_on(source.name, db),
                             None if target is None else get_queue_on(target.name, db),
                             None if limit is None else limit - moved, ids)
            if limit is not None and moved >= limit:
                break
        return moved
    chunks: list[list[int] | None] = [None] if ids is None else list(id_chunks(ids))
    db = placement.database_of(source)
    if target is not None and placement.database_of(target) != db:
        raise InvalidMessage(
            f"Queue {target.name!r} lives on database {placement.database_of(target)!r}, "
            f"{source.name!r} on {db!r}: a redrive moves messages within one database.")
    moved = 0
    batch = get_settings().PRUNE_BATCH
    while chunks and (limit is None or moved < limit):
        only = chunks[0]
        take = batch if limit is None else min(batch, limit - moved)
        with transaction.atomic(using=db):
            dead = Message.objects.using(db).filter(queue=source, state=State.DEAD)
            if only is not None:
                dead = dead.filter(pk__in=only)
            ids = _lock_ids(dead.order_by("id"), take)
            if not ids:
                chunks.pop(0)  # this chunk's (or, without ids, the queue's) are all moved
                continue
            destination = (Value(target.pk) if target is not None else Case(
                When(origin_queue__isnull=False, then=F("origin_queue")), default=Value(source.pk)))
            ready_again(
                Message.objects.using(db).filter(pk__in=ids),
                queue=destination, state=State.READY, attempts=0, owner="", lease_token="",
                visible_at=host_clock.database_now(db))
            ordered_groups.rejoin(db, ids)
            moved_rows = list(Message.objects.using(db).filter(pk__in=ids)
                              .only("pk", "queue_id", "attempts", "owner"))
            trace.record(db, moved_rows, Event.REDRIVEN, also_queue_id=source.pk,
                         detail=f"from queue {source.name}")
            ready_wakeups.wake_on_commit(db, {m.queue_id for m in moved_rows})
        moved += len(ids)
        if len(ids) < take:
            chunks.pop(0)
    if moved:
        signals.messages_redriven.send(sender=Message, queue=source, count=moved)
    return moved


def purge(queue: QueueRef) -> int:
    """Delete the queue's ready, scheduled, waiting and dead messages; in-flight ones
    finish normally."""
    q = get_queue(queue, fresh=True)
    if q.partitions is not None:
        return sum(purge(get_queue_on(q.name, db)) for db in partitions.served(q))
    db = placement.database_of(q)
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
    if q.group_holders is not None:
        with transaction.atomic(using=db):
            ordered_groups.repair(db, [q.pk])
    return removed


def retry_now(ids: list[int], *, queue: QueueRef | None = None) -> int:
    """Make scheduled messages (waiting on a delay or a retry backoff) ready at once.
    ``queue``: only that queue's (ids are per database: a queue placed on another
    database than the home one needs it)."""
    db, messages = _messages(queue)
    made_ready = 0
    for chunk in id_chunks(ids):
        with transaction.atomic(using=db):
            ready = _lock_ids(messages.filter(pk__in=chunk, state=State.SCHEDULED), len(chunk))
            now_ready = Message.objects.using(db).filter(pk__in=ready)
            ready_again(now_ready, state=State.READY, visible_at=host_clock.database_now(db))
            if ready:
                ready_wakeups.wake_on_commit(db, now_ready.values_list("queue_id", flat=True))
        made_ready += len(ready)
    return made_ready


def change_visibility(ids: list[int], seconds: float, *, queue: QueueRef | None = None) -> int:
    """SQS ChangeMessageVisibility: a claimed message's lease now ends ``seconds`` from now;
    a ready or scheduled one becomes visible then (0: ready at once). ``queue`` as for
    :func:`retry_now`."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not (
            0 <= seconds <= MAX_VISIBILITY):
        raise InvalidMessage(
            f"Visibility must be 0 to {MAX_VISIBILITY:g} seconds, got {shown_value(seconds)}.")
    db, in_queue = _messages(queue)
    until = host_clock.database_now(db) + timedelta(seconds=seconds)
    changed = 0
    for chunk in id_chunks(ids):
        with transaction.atomic(using=db):
            locked = _lock_ids(in_queue.filter(pk__in=chunk, state__in=[
                State.READY, State.SCHEDULED, State.CLAIMED]), len(chunk))
            messages = Message.objects.using(db).filter(pk__in=locked)
            now = messages.filter(state=State.CLAIMED).update(visible_at=until)
            now += ready_again(messages.exclude(state=State.CLAIMED),
                               state=State.READY if seconds == 0 else State.SCHEDULED,
                               visible_at=until)
            if now and seconds == 0:
                ready_wakeups.wake_on_commit(db, messages.values_list("queue_id", flat=True))
        changed += now
    return changed


def _messages(queue: QueueRef | None) -> tuple[str, QuerySet[Message]]:
    """The database to work on and its messages: ``queue``'s, or the current database's."""
    if queue is None:
        db = dialects.alias()
        return db, Message.objects.using(db).all()
    q = get_queue(queue)
    if q.partitions is not None:
        raise InvalidMessage(
            f"Queue {q.name!r} is partitioned and message ids are per partition: give the "
            "partition's queue (a received message's .queue) instead.")
    db = placement.database_of(q)
    return db, Message.objects.using(db).filter(queue=q)


def _lock_ids(query: QuerySet[Message], limit: int) -> list[int]:
    """Ids of up to ``limit`` rows of ``query``, locked, skipping rows others hold.

    Why by id: deleting and updating by primary key keeps MySQL's locks to the
    rows themselves (by a secondary key it also locks gaps and deadlocks).
    """
    query = engine_for().skipping_locked(query)
    return list(query.values_list("pk", flat=True)[:limit])


def get_message(message_id: int, *, queue: QueueRef | None = None) -> Message | None:
    """A pending or dead message by id, without claiming it. Its lease token is left
    out: the token is the proof of ownership, which only its receiver holds.
    ``queue`` as for :func:`retry_now`."""
    db, messages = _messages(queue)
    found = first_row(messages.filter(pk=one_id(message_id, "get_message")))
    return None if found is None else _as_shown(db, [found])[0]


def peek(queue: QueueRef | None = None, *, state: State | None = None,
         older_than: float | timedelta | None = None, limit: int = 100) -> list[Message]:
    """Messages matching the filters, oldest first, without claiming them (and without
    their lease tokens, as :func:`get_message`). A time a hand edit left unreadable is
    None (djqueue.storage.unreadable_rows), so such a row is listed with the others:
    this is where an operator looks for it. :func:`get_message` reads it so too."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PEEK:
        raise InvalidMessage(f"limit must be a whole number from 1 to {MAX_PEEK}, got {shown_value(limit)}.")
    q = get_queue(queue) if queue is not None else None
    if q is not None and q.partitions is not None:  # each partition's, oldest sent first
        found = [m for db in partitions.served(q) for m in peek(
            get_queue_on(q.name, db), state=state, older_than=older_than, limit=limit)]
        return sorted(found, key=lambda m: (m.sent_at is None, m.sent_at or 0))[:limit]
    db, query = _messages(q)
    query = query.order_by("id")
    if state is not None:
        try:
            query = query.filter(state=State(state))
        except ValueError:
            raise InvalidMessage(f"state is a djqueue.State, got {shown_value(state)}.") from None
    if older_than is not None:
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
        try:
            seconds = durations.check(seconds, "older_than", high=durations.MAX_RETENTION,
                                      positive=False)
        except ValueError as exc:
            raise InvalidMessage(str(exc)) from None
        query = query.filter(sent_at__lte=host_clock.database_now(db) - timedelta(seconds=seconds))
    return _as_shown(db, read_rows(query, limit))


def _as_shown(db: str, messages: list[Message]) -> list[Message]:
    """``messages`` without their lease tokens, and a topic delivery's body read as a
    claim reads it (attach_bodies: its publication time, which may not read, left out)."""
    attach_bodies(db, messages)
    for message in messages:
        message.lease_token = ""
    return messages


def delete(message: Message | int, *, only_unclaimed: bool = False,
           queue: QueueRef | None = None) -> bool:
    """Remove a message directly; history records it as deleted.

    With ``only_unclaimed`` a message some receiver holds is left alone (False).
    A message id (not a Message) takes ``queue`` as for :func:`retry_now`.
    """
    pk = message.pk if isinstance(message, Message) else message
    given_id(pk, InvalidMessage, "delete() takes a Message or a message id")
    if isinstance(message, Message):
        db = placement.database_of(message)
        messages: QuerySet[Message] = Message.objects.using(db).all()
    else:
        db, messages = _messages(queue)
    with transaction.atomic(using=db):
        row = messages.select_for_update().only(*_DELETE_READS).filter(pk=pk).first()
        if row is None or (only_unclaimed and row.state == State.CLAIMED):
            return False
        _delete_rows(db, [row])
    return True


def delete_batch(ids: list[int], *, only_unclaimed: bool = False,
                 queue: QueueRef | None = None) -> int:
    """Remove many messages directly, as :func:`delete` removes one; returns how many.

    Ids of messages already gone are passed over. Deletes ``PRUNE_BATCH`` messages a
    transaction, in id order, so a large selection holds its locks briefly and two
    batches over the same rows cannot deadlock. ``queue`` as for :func:`retry_now`.
    """
    db, messages = _messages(queue)
    deleted = 0
    for chunk in id_chunks(ids):
        with transaction.atomic(using=db):
            rows = [row for row in messages.select_for_update().only(*_DELETE_READS)
                    .filter(pk__in=chunk).order_by("pk")
                    if not (only_unclaimed and row.state == State.CLAIMED)]
            if rows:
                _delete_rows(db, rows)
        deleted += len(rows)
    return deleted


#: What deleting reads of a row: its state, and what its ordered group and its trace
#: record need. Not its body (a megabyte, maybe: history's copy reads only its length,
#: in the database, history_copy), nor its times, so a row holding a time no driver
#: reads back is deleted as the others (djqueue.storage.unreadable_rows).
_DELETE_READS = ("id", "queue_id", "state", "group_key", "attempts", "owner")


def _delete_rows(db: str, rows: list[Message]) -> None:
    """In the caller's transaction, with ``rows`` locked: record each as deleted in
    history and the trace, remove them, and let their ordered groups move on."""
    ids = [row.pk for row in rows]
    history_copy.archive(db, ids, Outcome.DELETED, host_clock.database_now(db))
    Message.objects.using(db).filter(pk__in=ids).delete()
    ordered_groups.hand_on(db, rows)
    trace.record(db, rows, Event.DELETED)


def finished(message_id: int, *, queue: QueueRef | None = None) -> History | None:
    """A finished message's history row; ``queue`` as for :func:`retry_now`. A time of it
    a hand edit left unreadable is None (djqueue.storage.unreadable_rows)."""
    message_id = one_id(message_id, "finished")
    if queue is None:
        return first_row(History.objects.using(dialects.alias()).filter(pk=message_id))
    q = get_queue(queue)
    return first_row(History.objects.using(placement.database_of(q)).filter(
        pk=message_id, queue_id=q.pk))
