"""An event loop kept for a worker's handler thread, for asgiref's ``async_to_sync``.

Why: a worker runs an async handler (and Django runs an async task function) with
``async_to_sync``, so that what the coroutine hands to ``sync_to_async`` with
``thread_sensitive=True`` (all of Django's async ORM) runs back in the handler's
own thread: on its database connection, which the worker checks and resets, and
inside an exactly-once handler's ack transaction. Called from a plain thread,
``async_to_sync`` makes a new thread and a new event loop for every call and
closes both (some 2.5 ms a call on the development machine). asgiref reuses a
running loop in another thread when the calling thread names it in
``SyncToAsync.threadlocal`` (``main_event_loop`` and its process id: what a thread
that ``sync_to_async`` started carries), and then works as before: the coroutine is
a task on that loop while the calling thread serves its thread-sensitive calls. So
a handler thread that runs async code keeps one loop, in a thread of its own, and
names it there. Plain path (an asgiref release not read for this): no loop is
kept, each call makes its own.

Read in asgiref 3.8 to 3.13, where ``AsyncToSync`` looks the two names up in the
calling thread (3.8 to 3.11 when it is made, 3.12 and 3.13 when it is called: both happen
there).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading

import asgiref
from asgiref.sync import SyncToAsync

from djqueue.storage.fastpath import verified

#: The asgiref feature releases whose AsyncToSync was read for this.
VERIFIED_ASGIREF = tuple((3, minor) for minor in range(8, 14))

_version = tuple(int(part) for part in asgiref.__version__.split(".")[:2])
enabled = _version in VERIFIED_ASGIREF
_here = threading.local()


def allow_kept_loop() -> None:
    """Let this thread keep a loop (a worker's handler thread says so as it starts);
    other threads, a caller of ``drain()`` among them, are left as asgiref has them."""
    _here.allowed = True


def keep_event_loop() -> None:
    """Start this thread's kept loop, unless it has one or may not keep one; later
    ``async_to_sync`` calls made in this thread run their coroutine on it."""
    if not (enabled and verified.enabled) or getattr(_here, "loop", None) is not None \
            or not getattr(_here, "allowed", False):
        return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True,
                              name=f"{threading.current_thread().name}-loop")
    thread.start()
    _here.loop, _here.thread = loop, thread
    SyncToAsync.threadlocal.main_event_loop = loop
    SyncToAsync.threadlocal.main_event_loop_pid = os.getpid()


def drop_event_loop() -> None:
    """Stop and close this thread's kept loop, if it has one (its thread is ending)."""
    loop = getattr(_here, "loop", None)
    if loop is None:
        return
    _here.loop = None
    SyncToAsync.threadlocal.main_event_loop = None
    SyncToAsync.threadlocal.main_event_loop_pid = None
    with contextlib.suppress(Exception):  # a generator's own error ends it all the same
        asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    _here.thread.join(5)
    if not loop.is_running():
        loop.close()
