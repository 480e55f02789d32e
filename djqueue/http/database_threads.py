"""The threads the HTTP API's async endpoints run their database work on.

Why a pool of its own: Django runs a sync function called from async code on a
thread per request (asgiref's thread-sensitive context), and a Django
connection belongs to its thread, so every request would open a connection.
Here a fixed number of threads (``HTTP_DATABASE_THREADS``) each keep one
connection for the life of the process; a thousand waiting long polls hold none
of them, since a wait happens on the event loop between two calls.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from django.db import connections

from djqueue.conf import get_settings
from djqueue.storage import placement

T = TypeVar("T")
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=get_settings().HTTP_DATABASE_THREADS,
                                       thread_name_prefix="djqueue-http-db")
        return _pool


def _call(function: Callable[..., T], *args: object) -> T:
    # A connection that failed (a server restart) is replaced; a healthy one is kept,
    # whatever CONN_MAX_AGE says of request-bound connections.
    for db in placement.databases():
        conn = connections[db]
        if conn.connection is not None and conn.errors_occurred and not conn.is_usable():
            conn.close()
    return function(*args)


async def in_database(function: Callable[..., T], *args: object) -> T:
    """Run ``function(*args)`` on a database thread; the event loop goes on meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(_executor(), _call, function, *args)


