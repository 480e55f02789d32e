"""Consumer groups of a topic: subscribing, broadcast consumers, replay and lag.

A cluster group's consumers share one queue; a broadcast group gives each
registered consumer a queue of its own. ``reset_group`` replays the retained
bodies from a point in time or a body id; ``group_lag`` tells how far each
subscription is behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Count, Min, QuerySet
from django.utils import timezone

from djqueue.api.topics import (
    BATCH,
    START_EARLIEST,
    START_NOW,
    check_name,
    deliver,
    get_topic,
    on_topic_database,
)
from djqueue.exceptions import ConfigurationError, InvalidMessage, TopicNotFound, shown_value
from djqueue.models import (
    PENDING_STATES,
    Body,
    ConsumerGroup,
    GroupMode,
    Message,
    Queue,
    State,
    Subscription,
    Topic,
)
from djqueue.models.names import is_valid_name
from djqueue.storage import dialects, ordered_groups
from djqueue.storage.claim_engines import engine_for
from djqueue.storage.queue_lookup import check_options, create_queue, get_queue_by_id
from djqueue.storage.unreadable_rows import ReadableTime, read_rows, without_times


@on_topic_database
def get_group(topic: str | Topic, group: str) -> ConsumerGroup:
    t = get_topic(topic)
    found = without_times(ConsumerGroup.objects.using(dialects.alias()).filter(
        topic=t, name=group)).first() if is_valid_name(group) else None
    if found is None:
        raise TopicNotFound(group, f"Topic {t.name!r} has no consumer group "
                            f"{shown_value(group)}.")
    found.topic = t
    return found



def _subscriptions(cg: ConsumerGroup, *, with_queues: bool = False) -> QuerySet[Subscription]:
    """The group's subscriptions (joined to their queues if ``with_queues``), read
    without their times (djqueue.storage.unreadable_rows.without_times)."""
    rows = Subscription.objects.using(dialects.alias()).filter(group=cg)
    return without_times(rows.select_related("queue") if with_queues else rows)


@on_topic_database
def subscribe(topic: str | Topic, group: str, *, mode: str = GroupMode.CLUSTER,
              start: str = START_NOW, **queue_options: Any) -> ConsumerGroup:
    """Create consumer group ``group`` on ``topic``.

    ``start``: "now" (only messages published from now on) or "earliest" (every
    retained message too). ``queue_options`` (visibility_timeout, max_attempts,
    backoff, dead_letter_queue, ordered, trace, ...) apply to its queues.
    """
    t = get_topic(topic)
    if mode not in GroupMode.values:
        raise ConfigurationError(f"mode must be one of {', '.join(GroupMode.values)}, "
                                 f"got {shown_value(mode)}.")
    _check_start(start)
    check_name(group, "group", 20)
    if isinstance(queue_options.get("dead_letter_queue"), Queue):
        queue_options["dead_letter_queue"] = queue_options["dead_letter_queue"].name
    # Now, not as each consumer's queue is created (a broadcast group's, later).
    check_options(f"{t.name}:{group}", queue_options)
    db = dialects.alias()
    with transaction.atomic(using=db):
        if ConsumerGroup.objects.using(db).filter(topic=t, name=group).exists():
            raise ConfigurationError(f"Topic {t.name!r} already has a group {group!r}.")
        cg = ConsumerGroup.objects.using(db).create(topic=t, name=group, mode=mode,
                                                    queue_options=queue_options)
        if mode == GroupMode.CLUSTER:
            _add_subscription(cg, "", start)
    return cg


@on_topic_database
def register_consumer(topic: str | Topic, group: str, consumer: str, *,
                      start: str = START_NOW) -> Queue:
    """Add a consumer to a broadcast group (idempotent); returns its own queue.

    For a cluster group this returns the group's shared queue.
    """
    cg = get_group(topic, group)
    _check_start(start)
    if cg.mode == GroupMode.CLUSTER:
        return _subscriptions(cg, with_queues=True).get().queue
    check_name(consumer, "consumer", 36)
    existing = _subscriptions(cg, with_queues=True).filter(consumer=consumer).first()
    if existing is not None:
        return existing.queue
    return _add_subscription(cg, consumer, start).queue


@on_topic_database
def unregister_consumer(topic: str | Topic, group: str, consumer: str) -> int:
    """Remove a broadcast consumer with its queue and its undelivered messages."""
    cg = get_group(topic, group)
    db = dialects.alias()
    if not is_valid_name(consumer):
        return 0
    sub = _subscriptions(cg).filter(consumer=consumer).first()
    if sub is None:
        return 0
    with transaction.atomic(using=db):
        removed, _ = Message.objects.using(db).filter(queue_id=sub.queue_id).delete()
        queue_id = sub.queue_id
        # Without their times: Django reads the rows it deletes (for signals, cascades).
        without_times(Subscription.objects.using(db).filter(pk=sub.pk)).delete()
        without_times(Queue.objects.using(db).filter(pk=queue_id)).delete()
    return removed


@on_topic_database
def group_queues(topic: str | Topic, group: str) -> list[Queue]:
    cg = get_group(topic, group)
    return [s.queue for s in _subscriptions(cg, with_queues=True).order_by("consumer")]



@on_topic_database
def reset_group(topic: str | Topic, group: str, *, to: datetime | int) -> int:
    """Move the group's position to a time or a message (body) id and replay from there.

    Undelivered deliveries are dropped, then every retained message published at
    or after ``to`` (or with id >= ``to``) is delivered again to each of the
    group's queues. Messages in flight finish normally. Returns the deliveries made.
    """
    cg = get_group(topic, group)
    if isinstance(to, datetime):
        if timezone.is_naive(to):
            raise InvalidMessage("A reset time must be timezone-aware.")
        start = Body.objects.filter(topic=cg.topic, published_at__gte=to)
    elif isinstance(to, int) and not isinstance(to, bool):
        start = Body.objects.filter(topic=cg.topic, id__gte=to)
    else:
        raise InvalidMessage(f"Reset to a datetime or a message id, not {to!r}.")
    made = 0
    for sub in _subscriptions(cg):
        made += _replay(sub, start)
    return made


def _replay(sub: Subscription, bodies_query: QuerySet[Body]) -> int:
    db = dialects.alias()
    queue = get_queue_by_id(sub.queue_id)
    while True:
        with transaction.atomic(using=db):
            query = Message.objects.using(db).filter(
                queue_id=sub.queue_id, state__in=[State.READY, State.SCHEDULED, State.WAITING])
            query = engine_for().skipping_locked(query)
            ids = list(query.values_list("pk", flat=True)[:BATCH])
            if ids:
                Message.objects.using(db).filter(pk__in=ids).delete()
        if len(ids) < BATCH:
            break
    made = 0
    last_id = 0
    while True:
        batch = read_rows(bodies_query.using(db).filter(id__gt=last_id).order_by("id"), BATCH)
        if not batch:
            break
        with transaction.atomic(using=db):
            made += len(deliver(db, queue, batch))
        last_id = batch[-1].pk
    if queue.group_holders is not None:
        with transaction.atomic(using=db):
            ordered_groups.repair(db, [queue.pk])
    return made


@dataclass(frozen=True)
class Lag:
    """Undelivered or unacked deliveries of one queue of a group, and the oldest one's time."""

    consumer: str
    pending: int
    oldest_published_at: datetime | None


@on_topic_database
def group_lag(topic: str | Topic, group: str) -> list[Lag]:
    """Per queue of the group (one for cluster, one per consumer for broadcast)."""
    cg = get_group(topic, group)
    db = dialects.alias()
    subs = list(cg.subscriptions.using(db).order_by("consumer").values_list("consumer", "queue_id"))
    stats = {row["queue_id"]: (row["n"], row["oldest"]) for row in Message.objects.using(db)
             .filter(queue_id__in=[q for _, q in subs], state__in=PENDING_STATES)
             .values("queue_id").annotate(n=Count("pk"), oldest=ReadableTime(Min("sent_at")))}
    return [Lag(consumer, *stats.get(q, (0, None))) for consumer, q in subs]



def _add_subscription(cg: ConsumerGroup, consumer: str, start: str) -> Subscription:
    db = dialects.alias()
    name = f"{cg.topic.name}:{cg.name}" + (f":{consumer}" if consumer else "")
    if Queue.objects.using(db).filter(name=name).exists():
        raise ConfigurationError(f"A queue named {name!r} already exists.")
    with transaction.atomic(using=db):
        queue = create_queue(name, database=db, **dict(cg.queue_options))
        sub = Subscription.objects.using(db).create(group=cg, consumer=consumer, queue=queue,
                                                    topic=cg.topic)
    if start == START_EARLIEST:
        _replay(sub, Body.objects.filter(topic=cg.topic))
    return sub


def _check_start(start: str) -> None:
    if start not in (START_NOW, START_EARLIEST):
        raise ConfigurationError(f"start must be 'now' or 'earliest', got {shown_value(start)}.")


