"""Producing and consuming messages: the functions ``djqueue`` exports."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q
from django.utils import timezone

from djqueue import dedup, doorbell, groups, rows, signals, trace, vendor
from djqueue.claim_cursor import cursors
from djqueue.claims import PromotionClock, claim_ready
from djqueue.conditions import compile_condition
from djqueue.encoding import encode as _encode
from djqueue.exceptions import InvalidMessage, NotOwner, PayloadTooLarge, QueueFull
from djqueue.lifecycle import fail, release, validate_delay
from djqueue.models import Event, History, Message, Queue, State
from djqueue.queues import QueueRef, get_queue
from djqueue.rows import insert_messages
from djqueue.wakeup import Backoff, wakeup

SMALLINT = (-32768, 32767)
MAX_GROUP_KEY_CHARS = 200


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
) -> Message | History:
    """Put one message on ``queue``. Inside ``transaction.atomic()`` it appears at commit.

    ``group_key``: in an ordered queue, messages of one key are delivered one at a
    time in send order. ``dedup_key``: while a message sent with that key is
    pending (or within the queue's ``dedup_window``) a second send returns the
    first message, marked ``duplicate = True`` (its History row if it already
    finished). ``block``: if the queue is at ``max_depth``, wait up to
    ``timeout`` seconds (default: forever) for room instead of raising QueueFull.
    """
    q = get_queue(queue)
    [message] = _build(q, [payload], [group_key], delay=delay, priority=priority,
                       headers=headers)
    if dedup_key is not None:
        dedup.validate_key(dedup_key)
    if not block and timeout is None:
        return _insert(q, [message], dedup_key=dedup_key)[0]
    return _with_flow_control(lambda: _insert(q, [message], dedup_key=dedup_key)[0],
                              block=block, timeout=timeout)


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
) -> list[Message]:
    """Put many messages on ``queue`` with multi-row inserts: all of them, or none.

    ``group_key`` applies to every message; ``group_keys`` gives one per payload.
    """
    q = get_queue(queue)
    payloads = list(payloads)
    if group_keys is not None:
        group_keys = list(group_keys)
        if group_key is not None or len(group_keys) != len(payloads):
            raise InvalidMessage("group_keys needs one key (or None) per payload, "
                                 "and excludes group_key.")
    keys = group_keys if group_keys is not None else [group_key] * len(payloads)
    messages = _build(q, payloads, keys, delay=delay, priority=priority, headers=headers)
    if not messages:
        return []
    return _with_flow_control(lambda: _insert(q, messages), block=block, timeout=timeout)


def _with_flow_control(insert, *, block: bool, timeout: float | None):
    """Run ``insert``; on QueueFull with ``block``, retry as consumers make room.

    Inside an outer transaction the queue row stays locked by the first try,
    so other senders to this queue wait too; consumers are not affected.
    """
    if timeout is not None:
        timeout = validate_delay(timeout)
    if not block:
        return insert()
    deadline = None if timeout is None else time.monotonic() + timeout
    backoff = Backoff()
    while True:
        try:
            return insert()
        except QueueFull:
            if not block or (deadline is not None and time.monotonic() >= deadline):
                raise
        backoff.sleep(deadline)


def _insert(queue: Queue, messages: list[Message], *, dedup_key: str | None = None) -> list:
    db = vendor.alias()
    if (len(messages) == 1 and queue.max_depth is None and not queue.trace
            and dedup_key is None and not (queue.ordered and messages[0].group_key)):
        conn = connections[db]
        vendor.retry_deadlocks(lambda: insert_messages(db, messages, conn))
        announce(messages, conn)
        return messages
    states = [m.state for m in messages]
    retried = False

    def inserting() -> Message | None:
        nonlocal retried
        if retried:  # a deadlock victim: start again from the built messages
            for message, state in zip(messages, states, strict=True):
                message.pk, message.state, message._state.adding = None, state, True
        retried = True
        with vendor.short_transaction(db):
            if dedup_key is not None:
                original = dedup.take(db, queue, dedup_key)
                if original is not None:
                    return original
            if queue.max_depth is not None:
                reserve_depth(queue, len(messages))
            groups.enqueue_states(db, messages)
            insert_messages(db, messages)
            if dedup_key is not None:
                dedup.assign(db, queue, dedup_key, messages[0])
            trace.record(db, messages, Event.SENT)
        return None

    original = vendor.retry_deadlocks(inserting)
    if original is not None:
        original.duplicate = True
        return [original]
    announce(messages)
    return messages


def _build(queue: Queue, payloads: list[Any], group_keys: list[Any], *, delay: Any,
           priority: Any, headers: Any) -> list[Message]:
    """Validate and build unsaved messages; the shared options are checked once."""
    validate_priority(priority)
    headers = check_headers(headers)
    now = timezone.now()
    visible_at = _visible_at(delay, now)
    shared = {"queue_id": queue.pk, "priority": priority, "headers": headers,
              "visible_at": visible_at, "sent_at": now,
              "state": State.SCHEDULED if visible_at > now else State.READY}
    # A batch merges its shared values into the defaults once; one message need not.
    many = len(payloads) > 1
    make = rows.builder(Message, **shared) if many else rows.builder(Message)
    own = {} if many else shared
    limit = queue.max_payload_bytes
    cache_queue = Message.queue.field.set_cached_value
    messages = []
    for payload, group_key in zip(payloads, group_keys, strict=True):
        body = encode_payload(payload)
        if group_key is not None:
            validate_group_key(group_key)
        if limit is not None and len(body.encode()) > limit:
            raise PayloadTooLarge(
                f"Payload of {len(body.encode())} bytes exceeds queue {queue.name!r}'s limit "
                f"of {limit} bytes.")
        message = make(body=body, group_key=group_key, **own)
        cache_queue(message, queue)
        message._payload = payload
        messages.append(message)
    return messages


def validate_group_key(group_key: Any) -> None:
    if group_key is not None and (not isinstance(group_key, str) or not group_key
                                  or len(group_key) > MAX_GROUP_KEY_CHARS):
        raise InvalidMessage(f"group_key must be a non-empty string of at most "
                             f"{MAX_GROUP_KEY_CHARS} characters, got {group_key!r}.")


def validate_priority(priority: Any) -> None:
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
            SMALLINT[0] <= priority <= SMALLINT[1]):
        raise InvalidMessage(f"priority must be an integer from {SMALLINT[0]} to {SMALLINT[1]},"
                             f" got {priority!r}.")


def encode_payload(payload: Any) -> str:
    try:
        return _encode(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"Payload is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidMessage("Payload is not JSON-serialisable: it contains itself "
                             "(or is nested too deeply).") from None


def check_headers(headers: Any) -> dict[str, Any] | None:
    if headers is None:
        return None
    if not isinstance(headers, dict) or not all(isinstance(k, str) for k in headers):
        raise InvalidMessage("headers must be a dict with string keys.")
    try:
        json.dumps(headers, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"headers are not JSON-serialisable: {exc}") from None
    return headers


def _visible_at(delay: Any, now: datetime) -> datetime:
    if isinstance(delay, datetime):
        if timezone.is_naive(delay):
            raise InvalidMessage("A send time must be timezone-aware.")
        return max(delay, now)
    seconds = validate_delay(delay)
    return now + timedelta(seconds=seconds) if seconds else now


def reserve_depth(queue: Queue, adding: int) -> None:
    """Refuse a send that would take the queue past ``max_depth``.

    The queue row is locked for the rest of the transaction, so concurrent
    senders to this queue count one after another: the limit is exact, at the
    price of one locking read and one index-range count per send.
    """
    db = vendor.alias()
    Queue.objects.using(db).select_for_update().filter(pk=queue.pk).values_list("pk").get()
    depth = Message.objects.using(db).filter(queue=queue).pending().count()
    if depth + adding > queue.max_depth:
        raise QueueFull(f"Queue {queue.name!r} holds {depth} of at most {queue.max_depth} "
                        f"messages; {adding} more do not fit.")


def announce(messages: list[Message], conn: BaseDatabaseWrapper | None = None) -> None:
    """Wake receivers and tell listeners once ``messages`` are committed: at once
    outside a transaction, else on commit. ``conn``: the djqueue database's
    connection, where the caller has it."""
    db = vendor.alias()
    if (conn or connections[db]).in_atomic_block:
        transaction.on_commit(lambda: _committed(messages), using=db)
    else:
        _committed(messages)  # what on_commit would do, without its bookkeeping


def _committed(messages: list[Message]) -> None:
    cursors.sent(messages)
    wakeup.notify()
    doorbell.ring(_queue_names(messages))
    signals.messages_sent.send(sender=Message, messages=messages)


def _queue_names(messages: list[Message]) -> Iterator[str]:
    for message in {m.queue_id: m for m in messages}.values():
        yield message.queue.name


def default_owner() -> str:
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{threading.get_ident() % 10**9}"


_promotion = PromotionClock()


def receive(
    queues: QueueRef | Sequence[QueueRef],
    *,
    max_messages: int = 1,
    visibility_timeout: float | None = None,
    wait: float = 0,
    owner: str | None = None,
    where: Q | str | None = None,
) -> list[Message]:
    """Claim up to ``max_messages`` ready messages, earlier queues first.

    With ``wait`` it blocks up to that many seconds for a first message
    (long poll), polling with an adaptive delay. Paused queues are skipped.
    ``where`` takes only messages matching a condition: a ``Q`` over Message
    fields, or an expression such as ``"priority >= 5 and headers.region = 'eu'"``
    (see djqueue.conditions).
    """
    condition = compile_condition(where)
    refs = [queues] if isinstance(queues, str | Queue) else list(queues)
    if not refs:
        raise InvalidMessage("receive() needs at least one queue.")
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
        raise InvalidMessage(f"max_messages must be a positive integer, got {max_messages!r}.")
    if visibility_timeout is not None and not (
            isinstance(visibility_timeout, int | float) and visibility_timeout > 0):
        raise InvalidMessage(f"visibility_timeout must be positive, got {visibility_timeout!r}.")
    wait = validate_delay(wait) or 0.0
    owner = owner or default_owner()
    deadline = time.monotonic() + wait
    backoff = Backoff()
    while True:
        _, messages = claim_ready([get_queue(r) for r in refs], max_messages, owner=owner,
                                  visibility_timeout=visibility_timeout, clock=_promotion,
                                  where=condition)
        if messages or time.monotonic() >= deadline:
            return messages
        backoff.sleep(deadline)


@contextlib.contextmanager
def consume(
    queue: QueueRef | Sequence[QueueRef],
    *,
    wait: float = 0,
    visibility_timeout: float | None = None,
) -> Iterator[Message | None]:
    """Q4M owner mode for one message: ack on clean exit, record the failure on exception.

    Yields None when nothing arrived within ``wait`` seconds.
    """
    with OwnerSession(queue, visibility_timeout=visibility_timeout) as session:
        yield session.next(wait=wait)


class OwnerSession:
    """Consecutive ``queue_wait()`` calls: receiving the next message acks the previous one.

    Leaving the ``with`` block acks the current message, or on an exception
    records it as a failed delivery (retried with backoff, or dead-lettered).
    """

    def __init__(self, queues: QueueRef | Sequence[QueueRef], *,
                 visibility_timeout: float | None = None) -> None:
        self.queues = queues
        self.visibility_timeout = visibility_timeout
        self.owner = default_owner()
        self.current: Message | None = None

    def next(self, wait: float = 0) -> Message | None:
        self.end()
        got = receive(self.queues, wait=wait, visibility_timeout=self.visibility_timeout,
                      owner=self.owner)
        self.current = got[0] if got else None
        return self.current

    def end(self) -> None:
        """Ack the current message (Q4M ``queue_end``)."""
        message, self.current = self.current, None
        if message is not None:
            message.ack()

    def abort(self) -> None:
        """Give the current message back uncounted (Q4M ``queue_abort``)."""
        message, self.current = self.current, None
        if message is not None:
            release([message])

    def __enter__(self) -> OwnerSession:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.end()
            return
        message, self.current = self.current, None
        if message is not None:
            with contextlib.suppress(NotOwner):
                fail(message, "".join(traceback.format_exception(exc)))
