"""Receiving from async code: ``areceive`` and ``aconsume`` (Q4M's owner mode).

Why: ``receive`` in a coroutine raises ``SynchronousOnlyOperation``, and a long poll
run through ``sync_to_async`` would hold Django's one sync thread for its whole
wait, stalling every other ``sync_to_async`` call of the process. So each claim here
is one claim of a :class:`~djqueue.api.receiving.Receiving` in that thread
(``thread_sensitive=True``, as the ORM's own ``a…`` methods do), and the wait
between claims passes on the event loop: from POLL_MIN doubling to POLL_MAX, the
last claim at ``wait``, and cut short by a send that commits, in this process or
another (djqueue.api.receive_wakeups), as a waiting ``receive`` is.

A received message is settled with its own ``aack``, ``anack``, ``aextend`` and
``aprogress`` (see :class:`djqueue.models.Message`).

The receiver's name defaults to the host, the process and the asyncio task, so that
two tasks of one event loop show as two owners, as two threads do for ``receive``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from asgiref.sync import sync_to_async
from django.db.models import Q

from djqueue.api.receiving import OwnerSession, Receiving, default_owner
from djqueue.models import Message
from djqueue.storage.queue_lookup import QueueRef
from djqueue.storage.transitions import release


def async_owner() -> str:
    """The default receiver name of the running asyncio task (its thread's otherwise)."""
    task = asyncio.current_task()
    base = default_owner().rsplit(":", 1)[0]
    return f"{base}:task-{id(task) % 10**9}" if task is not None else default_owner()


async def areceive(
    queues: QueueRef | Sequence[QueueRef],
    *,
    max_messages: int = 1,
    visibility_timeout: float | None = None,
    wait: float = 0,
    owner: str | None = None,
    where: Q | str | None = None,
) -> list[Message]:
    """:func:`djqueue.receive` for async code: the same arguments, checks and result;
    a ``wait`` passes on the event loop between claims (see the module's docstring)."""
    with Receiving(queues, max_messages=max_messages, visibility_timeout=visibility_timeout,
                   wait=wait, owner=async_owner() if owner is None else owner,
                   where=where) as receiving:
        claim = sync_to_async(receiving.claim, thread_sensitive=True)
        while not (got := await claim()) and not receiving.over():
            await receiving.backoff.asleep(receiving.pause_ends())
        return got


@contextlib.asynccontextmanager
async def aconsume(
    queue: QueueRef | Sequence[QueueRef],
    *,
    wait: float = 0,
    visibility_timeout: float | None = None,
) -> AsyncIterator[Message | None]:
    """:func:`djqueue.consume` for async code: ``async with aconsume(q) as message``.

    Yields None when nothing arrived within ``wait`` seconds. A clean exit acks the
    message; an exception records the failure (retried with backoff, or dead-lettered)
    and goes on, but a Postpone or a RetryAfter is done as it asks and ends there. A
    cancelled task gives its message back uncounted, at once, and stays cancelled: a
    consumer being shut down is not a failed delivery.
    """
    session = OwnerSession(queue, visibility_timeout=visibility_timeout)
    session.owner = async_owner()
    got = await areceive(queue, wait=wait, visibility_timeout=visibility_timeout,
                         owner=session.owner)
    session.current = got[0] if got else None
    in_sync_thread = sync_to_async(_settled, thread_sensitive=True)
    try:
        yield session.current
    except asyncio.CancelledError:
        if session.current is not None:
            # Shielded: the task is being cancelled, and the release must still run.
            await asyncio.shield(sync_to_async(release, thread_sensitive=True)(
                [session.current]))
        raise
    except BaseException as exc:
        if not await in_sync_thread(session, exc):
            raise
    else:
        await in_sync_thread(session, None)


def _settled(session: OwnerSession, exc: BaseException | None) -> bool:
    """The sync session's own ending: True when the exception has been dealt with."""
    return session.__exit__(None if exc is None else type(exc), exc,
                            None if exc is None else exc.__traceback__)
