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

from django.db import transaction
from django.utils import timezone

from djqueue import signals, vendor
from djqueue.claims import PromotionClock, claim_ready
from djqueue.exceptions import InvalidMessage, NotOwner, PayloadTooLarge, QueueFull
from djqueue.lifecycle import fail, release, validate_delay
from djqueue.models import Message, Queue, State
from djqueue.queues import QueueRef, get_queue
from djqueue.wakeup import Backoff, wakeup

SMALLINT = (-32768, 32767)
BULK_BATCH = 1000


def send(
    queue: QueueRef,
    payload: Any,
    *,
    delay: float | timedelta | datetime | None = None,
    priority: int = 0,
    headers: dict[str, Any] | None = None,
) -> Message:
    """Put one message on ``queue``. Inside ``transaction.atomic()`` it appears at commit."""
    q = get_queue(queue)
    message = _build(q, payload, delay=delay, priority=priority, headers=headers)
    db = vendor.alias()
    if q.max_depth is None:
        message.save(using=db, force_insert=True)
    else:
        with transaction.atomic(using=db):
            _reserve_depth(q, 1)
            message.save(using=db, force_insert=True)
    _announce([message])
    return message


def send_batch(
    queue: QueueRef,
    payloads: Iterable[Any],
    *,
    delay: float | timedelta | datetime | None = None,
    priority: int = 0,
    headers: dict[str, Any] | None = None,
) -> list[Message]:
    """Put many messages on ``queue`` with multi-row inserts: all of them, or none."""
    q = get_queue(queue)
    messages = [_build(q, p, delay=delay, priority=priority, headers=headers) for p in payloads]
    if not messages:
        return []
    db = vendor.alias()
    with transaction.atomic(using=db):
        if q.max_depth is not None:
            _reserve_depth(q, len(messages))
        Message.objects.using(db).bulk_create(messages, batch_size=BULK_BATCH)
    _announce(messages)
    return messages


def _build(queue: Queue, payload: Any, *, delay: Any, priority: Any, headers: Any) -> Message:
    body = encode_payload(payload)
    if queue.max_payload_bytes is not None and len(body.encode()) > queue.max_payload_bytes:
        raise PayloadTooLarge(
            f"Payload of {len(body.encode())} bytes exceeds queue {queue.name!r}'s limit of "
            f"{queue.max_payload_bytes} bytes.")
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
            SMALLINT[0] <= priority <= SMALLINT[1]):
        raise InvalidMessage(f"priority must be an integer from {SMALLINT[0]} to {SMALLINT[1]},"
                             f" got {priority!r}.")
    now = timezone.now()
    visible_at = _visible_at(delay, now)
    message = Message(
        queue=queue, body=body, headers=_check_headers(headers), priority=priority,
        state=State.SCHEDULED if visible_at > now else State.READY,
        visible_at=visible_at, sent_at=now)
    message._payload = payload
    return message


def encode_payload(payload: Any) -> str:
    try:
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"Payload is not JSON-serialisable: {exc}") from None


def _check_headers(headers: Any) -> dict[str, Any] | None:
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


def _reserve_depth(queue: Queue, adding: int) -> None:
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


def _announce(messages: list[Message]) -> None:
    def committed() -> None:
        wakeup.notify()
        signals.messages_sent.send(sender=Message, messages=messages)

    transaction.on_commit(committed, using=vendor.alias())


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
) -> list[Message]:
    """Claim up to ``max_messages`` ready messages, earlier queues first.

    With ``wait`` it blocks up to that many seconds for a first message
    (long poll), polling with an adaptive delay. Paused queues are skipped.
    """
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
        messages = claim_ready([get_queue(r) for r in refs], max_messages, owner=owner,
                               visibility_timeout=visibility_timeout, clock=_promotion)
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
