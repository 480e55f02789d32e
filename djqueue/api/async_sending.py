"""Sending from async code: ``asend``, ``asend_batch``, ``apublish``, ``apublish_batch``.

Why: Django's database layer is synchronous, so ``send`` called in a coroutine (an
async view, a consumer of an ASGI app) raises ``SynchronousOnlyOperation``. Each of
these runs its synchronous twin in the thread Django keeps for sync code
(``sync_to_async(thread_sensitive=True)``, as the ORM's own ``a…`` methods do), with
the same checks, errors and result.

A send that waits for room (``block=True`` on a queue at its ``max_depth``) waits on
the event loop, not in that thread: every ``sync_to_async`` call of the process
shares it, and one producer held back for a minute would hold up all of them. Each
try is one plain send; between tries it sleeps as the sync wait does, from POLL_MIN
doubling to POLL_MAX, and its last try falls at ``timeout``.

There is no async transaction in Django: a message sent here is committed when the
call returns. To send in the same transaction as other writes, put them in one sync
function with ``transaction.atomic()`` and call that with ``sync_to_async``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async

from djqueue.api.sending import send, send_batch
from djqueue.api.topics import publish, publish_batch
from djqueue.conf import get_settings
from djqueue.durations import validate_delay
from djqueue.exceptions import QueueFull
from djqueue.models import Body, History, Message, Topic
from djqueue.polling import apoll_until
from djqueue.storage.queue_lookup import QueueRef

Delay = float | timedelta | datetime | None


async def asend(queue: QueueRef, payload: Any, *, delay: Delay = None, priority: int = 0,
                headers: dict[str, Any] | None = None, group_key: str | None = None,
                dedup_key: str | None = None, block: bool = False,
                timeout: float | None = None, expires: Delay = None) -> Message | History:
    """:func:`djqueue.send` for async code (see the module's docstring)."""
    options = {"delay": delay, "priority": priority, "headers": headers,
               "group_key": group_key, "dedup_key": dedup_key, "expires": expires}
    return await _sending(send, (queue, payload), options, block=block, timeout=timeout)


async def asend_batch(queue: QueueRef, payloads: Iterable[Any], *, delay: Delay = None,
                      priority: int = 0, headers: dict[str, Any] | None = None,
                      group_key: str | None = None,
                      group_keys: Sequence[str | None] | None = None, block: bool = False,
                      timeout: float | None = None, expires: Delay = None) -> list[Message]:
    """:func:`djqueue.send_batch` for async code: all of them, or none."""
    options = {"delay": delay, "priority": priority, "headers": headers,
               "group_key": group_key, "group_keys": group_keys, "expires": expires}
    # Read once here: a generator's payloads would be gone by a second try.
    return await _sending(send_batch, (queue, list(payloads)), options, block=block,
                          timeout=timeout)


async def apublish(topic: str | Topic, payload: Any, *, headers: dict[str, Any] | None = None,
                   priority: int = 0, group_key: str | None = None,
                   expires: Delay = None) -> Body:
    """:func:`djqueue.publish` for async code."""
    return await sync_to_async(publish, thread_sensitive=True)(
        topic, payload, headers=headers, priority=priority, group_key=group_key,
        expires=expires)


async def apublish_batch(topic: str | Topic, payloads: Iterable[Any], *,
                         headers: dict[str, Any] | None = None, priority: int = 0,
                         group_key: str | None = None, expires: Delay = None) -> list[Body]:
    """:func:`djqueue.publish_batch` for async code."""
    return await sync_to_async(publish_batch, thread_sensitive=True)(
        topic, list(payloads), headers=headers, priority=priority, group_key=group_key,
        expires=expires)


async def _sending(function: Any, args: tuple, options: dict[str, Any], *, block: bool,
                   timeout: float | None) -> Any:
    """Run a sync send in Django's sync thread; with ``block``, try again after pauses
    on the event loop while the queue is full."""
    call = sync_to_async(function, thread_sensitive=True)
    if not block:
        return await call(*args, timeout=timeout, **options)
    timeout = validate_delay(timeout, "timeout")  # refused before the first try, as the sync send does
    sent: list[Any] = []
    refused: list[QueueFull] = []

    async def tried() -> bool:
        try:
            sent.append(await call(*args, **options))
        except QueueFull as exc:
            refused[:] = [exc]
            return False
        return True

    if await apoll_until(tried, timeout, get_settings().POLL_MAX):
        return sent[0]
    raise refused[0]
