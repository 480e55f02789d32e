"""Sending messages: validation, flow control, dedup and the insert, one short transaction."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from djqueue import signals, tracing
from djqueue.api import worker_wakeups
from djqueue.api.flow_control import reserve_depth, with_flow_control
from djqueue.api.message_checks import (
    check_headers,
    check_payloads,
    encode_payload,
    validate_group_key,
    validate_priority,
)
from djqueue.conf import get_settings
from djqueue.durations import validate_delay
from djqueue.exceptions import InvalidMessage, PayloadTooLarge
from djqueue.models import Event, History, Message, Queue, State
from djqueue.storage import (
    dedup,
    dialects,
    expiry,
    fastpath,
    host_clock,
    ordered_groups,
    partitions,
    placement,
    trace,
)
from djqueue.storage.claim_resume import resume_points
from djqueue.storage.payloads import utf8_size
from djqueue.storage.queue_lookup import QueueRef, get_queue
from djqueue.storage.statements.message_inserts import insert_messages


def send(
    queue: QueueRef,
    payload: Any,
    *,
    delay: float | timedelta | datetime | None = None,
    priority: int = 0,
    headers: dict[str, Any] | None = None,
    group_key: str | None = None,
    dedup_key: str | None = None,
    block: bool = False,
    timeout: float | None = None,
    expires: float | timedelta | datetime | None = None,
) -> Message | History:
    """Put one message on ``queue``. Inside ``transaction.atomic()`` it appears at commit.

    ``group_key``: in an ordered queue, messages of one key are delivered one at a
    time in send order. ``dedup_key``: while a message sent with that key is
    pending (or within the queue's ``dedup_window``) a second send returns the
    first message, marked ``duplicate = True`` (its History row if it already
    finished). ``block``: if the queue is at ``max_depth``, wait up to
    ``timeout`` seconds (default: forever) for room instead of raising QueueFull.
    ``expires``: seconds (or a timedelta) after it becomes visible, or an aware
    datetime; a message not delivered by then is dead-lettered unrun
    (djqueue.storage.expiry).
    """
    q = get_queue(queue)
    if q.partitions is not None:  # to the partition its key (or its turn) names
        validate_group_key(group_key)
        if dedup_key is not None:
            dedup.validate_key(dedup_key)
        return partitions.send_to_partition(q, group_key or dedup_key, lambda row: send(
            row, payload, delay=delay, priority=priority, headers=headers, group_key=group_key,
            dedup_key=dedup_key, block=block, timeout=timeout, expires=expires),
            block=block, timeout=timeout)
    with dialects.using(placement.database_of(q)), tracing.producing(
            q.name, 1, headers) as produced:
        [message] = _build(q, [payload], [group_key], delay=delay, priority=priority,
                           headers=produced.headers, expires=expires)
        if dedup_key is not None:
            dedup.validate_key(dedup_key)
        if not block and timeout is None:
            sent = _insert(q, [message], dedup_key=dedup_key)[0]
        else:
            sent = with_flow_control(lambda: _insert(q, [message], dedup_key=dedup_key)[0],
                                     block=block, timeout=timeout)
        produced.sent([sent.pk])
        return sent


def send_batch(
    queue: QueueRef,
    payloads: Iterable[Any],
    *,
    delay: float | timedelta | datetime | None = None,
    priority: int = 0,
    headers: dict[str, Any] | None = None,
    group_key: str | None = None,
    group_keys: Sequence[str | None] | None = None,
    block: bool = False,
    timeout: float | None = None,
    expires: float | timedelta | datetime | None = None,
) -> list[Message]:
    """Put many messages on ``queue`` with multi-row inserts: all of them, or none.

    ``group_key`` applies to every message; ``group_keys`` gives one per payload.
    ``expires`` applies to every message, as in :func:`send`.
    """
    q = get_queue(queue)
    check_payloads(payloads)
    payloads = list(payloads)
    if group_keys is not None:
        if isinstance(group_keys, str | bytes | bytearray) or not isinstance(group_keys,
                                                                               Iterable):
            raise InvalidMessage(f"group_keys takes one key (or None) per payload, in a "
                                 f"list, say; not {type(group_keys).__name__}.")
        group_keys = list(group_keys)
        if group_key is not None or len(group_keys) != len(payloads):
            raise InvalidMessage("group_keys needs one key (or None) per payload, "
                                 "and excludes group_key.")
    keys = group_keys if group_keys is not None else [group_key] * len(payloads)
    if q.partitions is not None:
        return _send_partitioned(q, payloads, keys, delay=delay, priority=priority,
                                 headers=headers, block=block, timeout=timeout,
                                 expires=expires)
    with dialects.using(placement.database_of(q)), tracing.producing(
            q.name, len(payloads), headers) as produced:
        messages = _build(q, payloads, keys, delay=delay, priority=priority,
                          headers=produced.headers, expires=expires)
        if not messages:
            return []
        return with_flow_control(lambda: _insert(q, messages), block=block, timeout=timeout)


def _send_partitioned(queue: Queue, payloads: list[Any], keys: list[Any], *,
                      block: bool, timeout: float | None, **options: Any) -> list[Message]:
    """send_batch on a partitioned queue: the keyed messages of each partition in one
    batch there, the keyless ones in one batch on the next partition in turn; each batch
    is all or none (one transaction a partition). Every message is checked first, as a
    batch on the queue's directory row: a bad one found in a later partition's batch
    would be refused after the earlier ones had committed."""
    _build(queue, payloads, keys, **options)
    parts: dict[str | None, list[int]] = {}
    for index, key in enumerate(keys):
        parts.setdefault(None if key is None else partitions.partition_for(queue, key),
                         []).append(index)
    sent: list[Any] = [None] * len(payloads)
    for indexes in parts.values():
        batch_keys = [keys[i] for i in indexes]
        messages = partitions.send_to_partition(
            queue, batch_keys[0], functools.partial(
                send_batch, payloads=[payloads[i] for i in indexes], group_keys=batch_keys,
                block=block, timeout=timeout, **options),
            block=block, timeout=timeout)
        for index, message in zip(indexes, messages, strict=True):
            sent[index] = message
    return sent


def _insert(queue: Queue, messages: list[Message], *, dedup_key: str | None = None) -> list:
    db = dialects.alias()
    if (len(messages) == 1 and queue.max_depth is None and not queue.trace
            and dedup_key is None
            and not (queue.group_holders is not None and messages[0].group_key)):
        conn = connections[db]
        dialects.retry_deadlocks(lambda: insert_messages(db, messages, conn))
        announce(messages, conn)
        return messages
    states = [m.state for m in messages]
    retried = False

    def inserting() -> Message | History | None:
        nonlocal retried
        if retried:  # a deadlock victim: start again from the built messages
            for message, state in zip(messages, states, strict=True):
                fastpath.mark_unsaved(message)
                message.state = state
        retried = True
        with dialects.short_transaction(db):
            if dedup_key is not None:
                original = dedup.take(db, queue, dedup_key)
                if original is not None:
                    return original
            if queue.max_depth is not None:
                reserve_depth(queue, len(messages))
            ordered_groups.enqueue_states(db, messages)
            insert_messages(db, messages)
            if dedup_key is not None:
                dedup.assign(db, queue, dedup_key, messages[0])
            trace.record(db, messages, Event.SENT)
        return None

    original = dialects.retry_deadlocks(inserting)
    if original is not None:
        original.duplicate = True
        return [original]
    announce(messages)
    return messages


def _build(queue: Queue, payloads: list[Any], group_keys: list[Any], *, delay: Any,
           priority: Any, headers: Any, expires: Any = None) -> list[Message]:
    """Validate and build unsaved messages; the shared options are checked once."""
    validate_priority(priority)
    headers = check_headers(headers)
    now = host_clock.database_now(placement.database_of(queue))
    visible_at = _visible_at(delay, now)
    if expires is not None or (headers and expiry.EXPIRES_HEADER in headers):
        headers = expiry.with_expiry(headers, expires, visible_at)
    elif queue.message_ttl:
        headers = expiry.with_expiry(headers, queue.message_ttl, visible_at)
    headers_bytes = len(json.dumps(headers, ensure_ascii=False).encode()) if headers else 0
    shared = {"queue_id": queue.pk, "priority": priority, "headers": headers,
              "visible_at": visible_at, "sent_at": now,
              "state": State.SCHEDULED if visible_at > now else State.READY}
    # A batch merges its shared values into the defaults once; one message need not.
    many = len(payloads) > 1
    make = fastpath.builder(Message, **shared) if many else fastpath.builder(Message)
    own = {} if many else shared
    limit = payload_limit(queue)
    messages = []
    for payload, group_key in zip(payloads, group_keys, strict=True):
        body = encode_payload(payload)
        if group_key is not None:
            validate_group_key(group_key)
        size = utf8_size(body) + headers_bytes
        if size > limit:
            raise PayloadTooLarge(
                f"Message of {size} bytes (payload and headers) exceeds queue "
                f"{queue.name!r}'s limit of {limit} bytes.")
        message = make(body=body, group_key=group_key, **own)
        _cache_queue(message, queue)
        message._payload = payload
        messages.append(message)
    return messages


def payload_limit(queue: Queue) -> int:
    """A message's most bytes: the queue's ``max_payload_bytes``, else the setting's."""
    return queue.max_payload_bytes or get_settings().MAX_PAYLOAD_BYTES


def _visible_at(delay: Any, now: datetime) -> datetime:
    if isinstance(delay, datetime):
        if timezone.is_naive(delay):
            raise InvalidMessage("A send time must be timezone-aware.")
        return max(delay, now)
    seconds = validate_delay(delay)
    return now + timedelta(seconds=seconds) if seconds else now


def announce(messages: list[Message], conn: BaseDatabaseWrapper | None = None) -> None:
    """Wake receivers and tell listeners once ``messages`` are committed: at once
    outside a transaction, else on commit. ``conn``: the djqueue database's
    connection, where the caller has it."""
    db = dialects.alias()
    if (conn or connections[db]).in_atomic_block:
        transaction.on_commit(lambda: _committed(messages, db), using=db)
    else:
        _committed(messages, db)  # what on_commit would do, without its bookkeeping


def _committed(messages: list[Message], db: str) -> None:
    resume_points.sent(messages)
    worker_wakeups.wake_receivers(db, _queue_names(messages))
    signals.messages_sent.send(sender=Message, messages=messages)


def _queue_names(messages: list[Message]) -> Iterator[str]:
    for message in {m.queue_id: m for m in messages}.values():
        yield message.queue.name


_cache_queue = fastpath.related_cacher(Message, "queue")
