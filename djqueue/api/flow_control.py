"""Flow control of sends: a queue's ``max_depth``, exact, and sends that wait for room.

A send to a queue with a ``max_depth`` counts the queue's pending messages with the
queue's row locked (:func:`reserve_depth`), in the transaction of its insert; a
blocking send (``block=True``) tries again as consumers make room
(:func:`with_flow_control`), as SQS-style and RabbitMQ producers are held back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from djqueue.durations import validate_delay
from djqueue.exceptions import QueueFull
from djqueue.models import Message, Queue
from djqueue.polling import Backoff
from djqueue.storage import dialects

T = TypeVar("T")


def with_flow_control(insert: Callable[[], T], *, block: bool, timeout: float | None) -> T:
    """Run ``insert``; on QueueFull with ``block``, retry as consumers make room.

    Inside an outer transaction the queue row stays locked by the first try,
    so other senders to this queue wait too; consumers are not affected.
    """
    timeout = validate_delay(timeout, "timeout")  # None stays None
    if not block:
        return insert()
    deadline = None if timeout is None else time.monotonic() + timeout
    backoff = Backoff()
    while True:
        try:
            return insert()
        except QueueFull:
            if deadline is not None and time.monotonic() >= deadline:
                raise
        backoff.sleep(deadline)


def reserve_depth(queue: Queue, adding: int) -> None:
    """Refuse a send that would take the queue past ``max_depth``.

    The queue row is locked for the rest of the transaction, so concurrent
    senders to this queue count one after another: the limit is exact, at the
    price of one locking read and one index-range count per send.
    """
    limit = queue.max_depth
    if limit is None:
        return
    db = dialects.alias()
    Queue.objects.using(db).select_for_update().filter(pk=queue.pk).values_list("pk").get()
    depth = Message.objects.using(db).filter(queue=queue).pending().count()
    if depth + adding > limit:
        raise QueueFull(f"Queue {queue.name!r} holds {depth} of at most {limit} "
                        f"messages; {adding} more do not fit.")
