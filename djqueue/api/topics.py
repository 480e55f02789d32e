"""Topics: publishing to every consumer group (a MySQL stream queue's, EMQ's tags).

``publish`` stores a body once and gives every subscription one delivery, a
small Message row referencing the body. A cluster group's consumers share its
queue; a broadcast group gives each registered consumer a queue of its own.
Deliveries are ordinary messages: receive, ack, retries, dead letters, ordered
groups, conditions and trace all apply. Bodies stay for the topic's retention
so a group can be reset to an earlier point and replay them
(djqueue.api.consumer_groups).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef

from djqueue.api.flow_control import reserve_depth
from djqueue.api.message_checks import (
    check_headers,
    check_payloads,
    encode_payload,
    validate_group_key,
    validate_priority,
)
from djqueue.api.sending import announce
from djqueue.conf import get_settings
from djqueue.exceptions import ConfigurationError, PayloadTooLarge, TopicNotFound, shown_value
from djqueue.models import (
    Body,
    Event,
    Message,
    Queue,
    State,
    Subscription,
    Topic,
)
from djqueue.models.names import is_valid_name
from djqueue.models.queue import validate_queue_name
from djqueue.models.row_checks import check_row
from djqueue.storage import dialects, expiry, host_clock, ordered_groups, placement, trace
from djqueue.storage.payloads import utf8_size
from djqueue.storage.queue_lookup import get_queue_by_id
from djqueue.storage.statements.message_inserts import insert_messages
from djqueue.storage.statements.row_inserts import insert_rows
from djqueue.storage.unreadable_rows import without_times

BATCH = 1000
START_NOW, START_EARLIEST = "now", "earliest"
F = TypeVar("F", bound=Callable[..., Any])


def topic_database(topic: str | Topic) -> str:
    """A topic's database: its row's, else the one a QUEUE_DATABASES rule names for its
    name, else the home one. Its bodies, groups and the groups' queues live there too
    (a delivery references its body)."""
    if isinstance(topic, Topic):
        return placement.database_of(topic)
    return (placement.ruled(topic) if isinstance(topic, str) else None) or placement.home()


def on_topic_database(function: F) -> F:
    """Run ``function(topic, ...)`` on its topic's database (see dialects.using)."""
    @functools.wraps(function)
    def on_database(topic: str | Topic, *args: Any, **kwargs: Any) -> Any:
        with dialects.using(topic_database(topic)):
            return function(topic, *args, **kwargs)
    return cast(F, on_database)


@on_topic_database
def create_topic(name: str, *, retention: float | None = None, exist_ok: bool = False) -> Topic:
    check_name(name, "topic", 40)
    db = dialects.alias()
    existing = without_times(Topic.objects.using(db).filter(name=name)).first()
    if existing is not None:
        if exist_ok:
            return existing
        raise ConfigurationError(f"Topic {name!r} already exists.")
    topic = Topic(name=name) if retention is None else Topic(name=name, retention=retention)
    check_row(topic, f"topic {name!r}")
    topic.save(using=db)
    return topic


@on_topic_database
def get_topic(topic: str | Topic) -> Topic:
    if isinstance(topic, Topic):
        return topic
    if not isinstance(topic, str):
        raise TypeError(f"A topic is named by a string or given as a Topic, not "
                        f"{type(topic).__name__}.")
    found = without_times(Topic.objects.using(dialects.alias()).filter(name=topic)).first(
        ) if is_valid_name(topic) else None
    if found is None:
        raise TopicNotFound(str(topic), f"Topic {topic!r} does not exist. Create it with "
                            "djqueue.create_topic().")
    return found


def publish(topic: str | Topic, payload: Any, *, headers: dict[str, Any] | None = None,
            priority: int = 0, group_key: str | None = None,
            expires: float | timedelta | datetime | None = None) -> Body:
    """Publish one message to every group of ``topic``. Inside a transaction it is
    delivered at commit. ``expires``: as in ``send``, for each group's delivery."""
    return publish_batch(topic, [payload], headers=headers, priority=priority,
                         group_key=group_key, expires=expires)[0]


@on_topic_database
def publish_batch(topic: str | Topic, payloads: Iterable[Any], *,
                  headers: dict[str, Any] | None = None, priority: int = 0,
                  group_key: str | None = None,
                  expires: float | timedelta | datetime | None = None) -> list[Body]:
    t = get_topic(topic)
    validate_priority(priority)
    validate_group_key(group_key)
    check_payloads(payloads)
    headers = check_headers(headers)
    now = host_clock.database_now(dialects.alias())
    if expires is not None or (headers and expiry.EXPIRES_HEADER in headers):
        headers = expiry.with_expiry(headers, expires, now)
    extra = len(json.dumps(headers, ensure_ascii=False).encode()) if headers else 0
    limit = get_settings().MAX_PAYLOAD_BYTES
    bodies = [Body(topic=t, body=encode_payload(p), headers=headers,
                   priority=priority, group_key=group_key, published_at=now) for p in payloads]
    for body in bodies:
        if (size := utf8_size(body.body) + extra) > limit:
            raise PayloadTooLarge(f"Message of {size} bytes "
                                  f"(payload and headers) exceeds the limit of {limit} bytes.")
    if not bodies:
        return []
    db = dialects.alias()
    with transaction.atomic(using=db):
        _save_bodies(db, bodies)
        subscriptions = list(Subscription.objects.using(db).filter(topic=t)
                             .values_list("queue_id", flat=True))
        for queue_id in subscriptions:
            deliver(db, get_queue_by_id(queue_id), bodies)
    return bodies


def _save_bodies(db: str, bodies: list[Body]) -> None:
    """Insert bodies and learn their ids.

    Why two ways: MariaDB >= 10.5, PostgreSQL and SQLite return ids from a
    multi-row insert, which ``bulk_create`` reads; MySQL does not, and there the
    ids are worked out from the first (row_inserts.insert_rows).
    """
    from django.db import connections

    if connections[db].features.can_return_rows_from_bulk_insert:
        Body.objects.using(db).bulk_create(bodies, batch_size=BATCH)
    else:
        insert_rows(db, bodies, ids=True)


def _with_ttl(queue: Queue, body: Body, now: datetime) -> dict[str, Any] | None:
    """A delivery's headers: the publication's, with the group queue's ``message_ttl``
    from now where the publication gave no expiry of its own."""
    headers = body.headers
    if not queue.message_ttl or (headers and expiry.EXPIRES_HEADER in headers):
        return headers
    return expiry.with_expiry(headers, queue.message_ttl, now)


def deliver(db: str, queue: Queue, bodies: Sequence[Body]) -> list[Message]:
    """Insert one delivery of each body into ``queue`` (in the caller's transaction). A
    body replayed whose publication time a hand edit left unreadable (read as None,
    djqueue.storage.unreadable_rows) is sent now."""
    now = host_clock.database_now(db)
    messages = [Message(queue=queue, body="", stored_body=b, headers=_with_ttl(queue, b, now),
                        priority=b.priority, group_key=b.group_key, state=State.READY,
                        visible_at=now, sent_at=b.published_at or now) for b in bodies]
    if queue.max_depth is not None:
        reserve_depth(queue, len(messages))
    ordered_groups.enqueue_states(db, messages)
    insert_messages(db, messages)  # with their ids on every database, for the trace
    trace.record(db, messages, Event.SENT)
    announce(messages)
    return messages


def collect_bodies(now: datetime | None = None, batch: int = 5000) -> int:
    """Delete bodies past their topic's retention that no delivery references."""
    db = dialects.alias()
    now = now or host_clock.database_now(db)
    removed = 0
    for topic_id, retention in Topic.objects.using(db).values_list("pk", "retention"):
        cutoff = now - timedelta(seconds=Topic(retention=retention).retention_seconds())
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


def check_name(name: str, what: str, longest: int) -> None:
    if not isinstance(name, str):  # Django's validator writes it as text first
        raise ConfigurationError(f"A {what} name is a string, not {type(name).__name__}.")
    try:
        validate_queue_name(name)
    except ValidationError:
        raise ConfigurationError(f"Invalid {what} name {shown_value(name)}.") from None
    if ":" in name or len(name) > longest:
        raise ConfigurationError(f"A {what} name has at most {longest} characters and no ':', "
                                 f"got {shown_value(name)}.")
