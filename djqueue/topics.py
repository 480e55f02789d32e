"""Topics with consumer groups, replay and lag (a MySQL stream queue's, EMQ's tags).

``publish`` stores a body once and gives every subscription one delivery, a
small Message row referencing the body. A cluster group's consumers share its
queue; a broadcast group gives each registered consumer a queue of its own.
Deliveries are ordinary messages: receive, ack, retries, dead letters, ordered
groups, conditions and trace all apply. Bodies stay for the topic's retention
so a group can be reset to an earlier point and replay them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, Min, OuterRef
from django.utils import timezone

from djqueue import groups, trace, vendor
from djqueue.api import (
    announce,
    check_headers,
    encode_payload,
    reserve_depth,
    validate_group_key,
    validate_priority,
)
from djqueue.exceptions import ConfigurationError, InvalidMessage, QueueNotFound
from djqueue.models import (
    PENDING_STATES,
    Body,
    ConsumerGroup,
    Event,
    GroupMode,
    Message,
    Queue,
    State,
    Subscription,
    Topic,
)
from djqueue.models.queue import validate_queue_name
from djqueue.queues import create_queue, get_queue_by_id

BATCH = 1000
START_NOW, START_EARLIEST = "now", "earliest"


def create_topic(name: str, *, retention: float | None = None, exist_ok: bool = False) -> Topic:
    _check_name(name, "topic", 40)
    db = vendor.alias()
    existing = Topic.objects.using(db).filter(name=name).first()
    if existing is not None:
        if exist_ok:
            return existing
        raise ConfigurationError(f"Topic {name!r} already exists.")
    topic = Topic(name=name) if retention is None else Topic(name=name, retention=retention)
    try:
        topic.full_clean()
    except ValidationError as exc:
        raise ConfigurationError(f"Invalid topic {name!r}: {exc.message_dict}") from None
    if topic.retention < 0:
        raise ConfigurationError("A topic's retention must not be negative.")
    topic.save(using=db)
    return topic


def get_topic(topic: str | Topic) -> Topic:
    if isinstance(topic, Topic):
        return topic
    found = Topic.objects.using(vendor.alias()).filter(name=topic).first()
    if found is None:
        raise QueueNotFound(f"No topic named {topic!r}.")
    return found


def get_group(topic: str | Topic, group: str) -> ConsumerGroup:
    t = get_topic(topic)
    found = ConsumerGroup.objects.using(vendor.alias()).filter(topic=t, name=group).first()
    if found is None:
        raise QueueNotFound(f"Topic {t.name!r} has no consumer group {group!r}.")
    found.topic = t
    return found


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
                                 f"got {mode!r}.")
    _check_start(start)
    _check_name(group, "group", 20)
    if isinstance(queue_options.get("dead_letter_queue"), Queue):
        queue_options["dead_letter_queue"] = queue_options["dead_letter_queue"].name
    db = vendor.alias()
    with transaction.atomic(using=db):
        if ConsumerGroup.objects.using(db).filter(topic=t, name=group).exists():
            raise ConfigurationError(f"Topic {t.name!r} already has a group {group!r}.")
        cg = ConsumerGroup.objects.using(db).create(topic=t, name=group, mode=mode,
                                                    queue_options=queue_options)
        if mode == GroupMode.CLUSTER:
            _add_subscription(cg, "", start)
    return cg


def register_consumer(topic: str | Topic, group: str, consumer: str, *,
                      start: str = START_NOW) -> Queue:
    """Add a consumer to a broadcast group (idempotent); returns its own queue.

    For a cluster group this returns the group's shared queue.
    """
    cg = get_group(topic, group)
    _check_start(start)
    if cg.mode == GroupMode.CLUSTER:
        return cg.subscriptions.using(vendor.alias()).get().queue
    _check_name(consumer, "consumer", 36)
    existing = Subscription.objects.using(vendor.alias()).filter(group=cg, consumer=consumer).first()
    if existing is not None:
        return existing.queue
    return _add_subscription(cg, consumer, start).queue


def unregister_consumer(topic: str | Topic, group: str, consumer: str) -> int:
    """Remove a broadcast consumer with its queue and its undelivered messages."""
    cg = get_group(topic, group)
    db = vendor.alias()
    sub = Subscription.objects.using(db).filter(group=cg, consumer=consumer).first()
    if sub is None:
        return 0
    with transaction.atomic(using=db):
        removed, _ = Message.objects.using(db).filter(queue_id=sub.queue_id).delete()
        queue_id = sub.queue_id
        sub.delete()
        Queue.objects.using(db).filter(pk=queue_id).delete()
    return removed


def group_queues(topic: str | Topic, group: str) -> list[Queue]:
    cg = get_group(topic, group)
    return [s.queue for s in cg.subscriptions.using(vendor.alias()).select_related("queue")
            .order_by("consumer")]


def publish(topic: str | Topic, payload: Any, *, headers: dict[str, Any] | None = None,
            priority: int = 0, group_key: str | None = None) -> Body:
    """Publish one message to every group of ``topic``. Inside a transaction it is
    delivered at commit."""
    return publish_batch(topic, [payload], headers=headers, priority=priority,
                         group_key=group_key)[0]


def publish_batch(topic: str | Topic, payloads: Iterable[Any], *,
                  headers: dict[str, Any] | None = None, priority: int = 0,
                  group_key: str | None = None) -> list[Body]:
    t = get_topic(topic)
    validate_priority(priority)
    validate_group_key(group_key)
    now = timezone.now()
    bodies = [Body(topic=t, body=encode_payload(p), headers=check_headers(headers),
                   priority=priority, group_key=group_key, published_at=now) for p in payloads]
    if not bodies:
        return []
    db = vendor.alias()
    with transaction.atomic(using=db):
        _save_bodies(db, bodies)
        subscriptions = list(Subscription.objects.using(db).filter(topic=t)
                             .values_list("queue_id", flat=True))
        for queue_id in subscriptions:
            _deliver(db, get_queue_by_id(queue_id), bodies)
    return bodies


def _save_bodies(db: str, bodies: list[Body]) -> None:
    """Insert bodies and learn their ids.

    Why two ways: MariaDB >= 10.5, PostgreSQL and SQLite return ids from a
    multi-row insert; MySQL does not, so there each body is its own insert.
    """
    from django.db import connections

    if connections[db].features.can_return_rows_from_bulk_insert:
        Body.objects.using(db).bulk_create(bodies, batch_size=BATCH)
    else:
        for body in bodies:
            body.save(using=db, force_insert=True)


def _deliver(db: str, queue: Queue, bodies: Sequence[Body]) -> list[Message]:
    """Insert one delivery of each body into ``queue`` (in the caller's transaction)."""
    now = timezone.now()
    messages = [Message(queue=queue, body="", stored_body=b, headers=b.headers,
                        priority=b.priority, group_key=b.group_key, state=State.READY,
                        visible_at=now, sent_at=b.published_at) for b in bodies]
    if queue.max_depth is not None:
        reserve_depth(queue, len(messages))
    groups.enqueue_states(db, messages)
    Message.objects.using(db).bulk_create(messages, batch_size=BATCH)
    trace.record(db, messages, Event.SENT)
    announce(messages)
    return messages


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
    for sub in cg.subscriptions.using(vendor.alias()).all():
        made += _replay(sub, start)
    return made


def _replay(sub: Subscription, bodies_query) -> int:
    db = vendor.alias()
    queue = get_queue_by_id(sub.queue_id)
    while True:
        with transaction.atomic(using=db):
            query = Message.objects.using(db).filter(
                queue_id=sub.queue_id, state__in=[State.READY, State.SCHEDULED, State.WAITING])
            if vendor.claims_by_skip_locked():
                query = query.select_for_update(skip_locked=True)
            ids = list(query.values_list("pk", flat=True)[:BATCH])
            if ids:
                Message.objects.using(db).filter(pk__in=ids).delete()
        if len(ids) < BATCH:
            break
    made = 0
    last_id = 0
    while True:
        batch = list(bodies_query.using(db).filter(id__gt=last_id).order_by("id")[:BATCH])
        if not batch:
            break
        with transaction.atomic(using=db):
            made += len(_deliver(db, queue, batch))
        last_id = batch[-1].pk
    if queue.ordered:
        with transaction.atomic(using=db):
            groups.repair(db, [queue.pk])
    return made


@dataclass(frozen=True)
class Lag:
    """Undelivered or unacked deliveries of one queue of a group, and the oldest one's time."""

    consumer: str
    pending: int
    oldest_published_at: datetime | None


def group_lag(topic: str | Topic, group: str) -> list[Lag]:
    """Per queue of the group (one for cluster, one per consumer for broadcast)."""
    cg = get_group(topic, group)
    db = vendor.alias()
    subs = list(cg.subscriptions.using(db).order_by("consumer").values_list("consumer", "queue_id"))
    stats = {row["queue_id"]: row for row in Message.objects.using(db)
             .filter(queue_id__in=[q for _, q in subs], state__in=PENDING_STATES)
             .values("queue_id").annotate(n=Count("pk"), oldest=Min("sent_at"))}
    return [Lag(consumer, stats.get(q, {}).get("n", 0), stats.get(q, {}).get("oldest"))
            for consumer, q in subs]


def collect_bodies(now: datetime | None = None, batch: int = 5000) -> int:
    """Delete bodies past their topic's retention that no delivery references."""
    db = vendor.alias()
    now = now or timezone.now()
    removed = 0
    for topic_id, retention in Topic.objects.using(db).values_list("pk", "retention"):
        cutoff = now - timedelta(seconds=retention)
        while True:
            ids = list(Body.objects.using(db).filter(topic_id=topic_id, published_at__lt=cutoff)
                       .exclude(Exists(Message.objects.filter(stored_body=OuterRef("pk"))))
                       .values_list("pk", flat=True)[:batch])
            if not ids:
                break
            try:
                with transaction.atomic(using=db):
                    removed += Body.objects.using(db).filter(pk__in=ids).exclude(
                        Exists(Message.objects.filter(stored_body=OuterRef("pk")))).delete()[0]
            except IntegrityError:
                # A replay referenced one of them meanwhile (the foreign key refused
                # the delete); the next pass collects the rest.
                break
            if len(ids) < batch:
                break
    return removed


def _add_subscription(cg: ConsumerGroup, consumer: str, start: str) -> Subscription:
    db = vendor.alias()
    name = f"{cg.topic.name}:{cg.name}" + (f":{consumer}" if consumer else "")
    if Queue.objects.using(db).filter(name=name).exists():
        raise ConfigurationError(f"A queue named {name!r} already exists.")
    with transaction.atomic(using=db):
        queue = create_queue(name, **dict(cg.queue_options))
        sub = Subscription.objects.using(db).create(group=cg, consumer=consumer, queue=queue,
                                                    topic=cg.topic)
    if start == START_EARLIEST:
        _replay(sub, Body.objects.filter(topic=cg.topic))
    return sub


def _check_start(start: str) -> None:
    if start not in (START_NOW, START_EARLIEST):
        raise ConfigurationError(f"start must be 'now' or 'earliest', got {start!r}.")


def _check_name(name: str, what: str, longest: int) -> None:
    try:
        validate_queue_name(name)
    except ValidationError:
        raise ConfigurationError(f"Invalid {what} name {name!r}.") from None
    if ":" in name or len(name) > longest:
        raise ConfigurationError(f"A {what} name has at most {longest} characters and no ':', "
                                 f"got {name!r}.")
