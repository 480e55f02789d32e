"""Managing queues: create, look up, pause and resume, change limits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from djqueue.exceptions import ConfigurationError
from djqueue.models import MessageGroup, Queue, QueueLimiter
from djqueue.models.row_checks import check_row
from djqueue.storage import ordered_groups, partition_layout, partitions, placement, queue_lookup
from djqueue.storage.queue_lookup import QueueRef, get_queue

__all__ = ["LIMIT_FIELDS", "add_partition", "create_queue", "get_queue", "limits_changed",
           "pause", "remove_partition", "resume", "set_limits", "set_paused"]

#: The queue options that limit claims (see djqueue.storage.claim_limits).
LIMIT_FIELDS = ("rate_limit", "rate_burst", "concurrency_limit", "group_concurrency",
                "group_rate_limit", "group_rate_burst")


def create_queue(name: str, *, exist_ok: bool = False, database: str | None = None,
                 partitions: list[str] | None = None, **options: Any) -> Queue:
    """Create a queue with validated options; ``dead_letter_queue`` may be a name.

    ``database``: keep it on that alias (djqueue.storage.placement). ``partitions``:
    spread it over these aliases (djqueue.storage.partitions; its dead-letter queue
    must be partitioned over the same ones). By default a QUEUE_DATABASES rule
    decides, else it lives on the home database.
    """
    layout: Sequence[str] | None = partitions
    if layout is None and isinstance(name, str):
        layout = placement.ruled_partitions(name)
    if layout is None:
        return queue_lookup.create_queue(name, exist_ok=exist_ok, database=database, **options)
    if database is not None:
        raise ConfigurationError(f"Queue {name!r}: give database= or partitions=, not both.")
    return partition_layout.create_partitioned(name, layout, exist_ok=exist_ok, **options)


add_partition = partition_layout.add_partition
remove_partition = partition_layout.remove_partition


def set_paused(ref: QueueRef, paused: bool) -> Queue:
    """Pause or resume a queue (every partition of a partitioned one)."""
    queue = get_queue(ref, fresh=True)
    for row in _rows(queue):
        Queue.objects.using(placement.database_of(row)).filter(pk=row.pk).update(paused=paused)
    queue.paused = paused
    queue_lookup.forget(queue.name)
    return queue


def _rows(queue: Queue) -> list[Queue]:
    """A queue's rows: its own, and each partition's."""
    if queue.partitions is None:
        return [queue]
    return [queue, *(queue_lookup.get_queue_on(queue.name, db) for db in partitions.served(queue)
                     if db != placement.database_of(queue))]


def pause(ref: QueueRef) -> Queue:
    """Stop workers claiming from the queue; sends still succeed."""
    return set_paused(ref, True)


def resume(ref: QueueRef) -> Queue:
    return set_paused(ref, False)


def set_limits(ref: QueueRef, **limits: Any) -> Queue:
    """Change a queue's limits while workers run: ``rate_limit`` ("50/s", "300/m",
    "1000/h"; "" for none), ``rate_burst``, ``concurrency_limit`` (None for none, 0 to
    start nothing), ``group_concurrency``, ``group_rate_limit``, ``group_rate_burst``.

    Claims read a limited queue's limits afresh, so a changed limit holds from the
    next claim; a queue that gains or loses its first limit is seen within
    QUEUE_CACHE_TTL. A raised ``group_concurrency`` lets waiting messages into the
    new places at once.
    """
    unknown = set(limits) - set(LIMIT_FIELDS)
    if unknown:
        raise ConfigurationError(f"Unknown limit(s): {', '.join(sorted(unknown))}; "
                                 f"limits are {', '.join(LIMIT_FIELDS)}.")
    found = get_queue(ref)
    if found.partitions is not None:  # each partition holds them for its own messages
        for row in _rows(found)[1:]:
            set_limits(row, **limits)
    db = placement.database_of(found)
    with transaction.atomic(using=db):
        queue = queue_lookup.working_rows(db).select_for_update().get(pk=found.pk)
        before = Queue(**{f: getattr(queue, f) for f in LIMIT_FIELDS})
        for name, value in limits.items():
            setattr(queue, name, value)  # a rate of None is stored as "" by Queue.clean
        # Not the creation time it left unread: no limit depends on it.
        check_row(queue, f"limits for {queue.name!r}", exclude=queue.get_deferred_fields(),
                  validate_unique=False)
        queue.save(using=db, update_fields=list(limits))
        limits_changed(db, before, queue)
    return queue


def limits_changed(db: str, before: Queue, queue: Queue) -> None:
    """After ``queue``'s limits changed from ``before``'s (in the transaction that saved
    them, which copied them to the queue's limiter row; the admin's form calls this
    too): start a changed rate with full buckets (and forget the keys' marks of the
    old one), and fill new per-key places."""
    full = {"tokens": 0.0, "refilled_at": 0.0}  # filled from the epoch: as full as allowed
    if (before.rate_limit, before.rate_burst) != (queue.rate_limit, queue.rate_burst):
        QueueLimiter.objects.using(db).filter(queue_id=queue.pk).update(**full)
    if (before.group_rate_limit, before.group_rate_burst) != (queue.group_rate_limit,
                                                                queue.group_rate_burst):
        MessageGroup.objects.using(db).filter(queue_id=queue.pk).update(
            throttled_until=None, **full)
    queue_lookup.forget(queue.name)
    if before.group_concurrency != queue.group_concurrency:
        ordered_groups.repair(db, [queue.pk])
