"""Waking idle workers in other processes the moment a send commits.

A worker binds a UDP socket on ``WAKE_HOST`` (an ephemeral port) and records
the address in its worker row. A process whose send commits looks up the
addresses of the workers serving that queue (cached for ``WAKE_REFRESH``
seconds) and sends each a datagram holding the alias of the database the messages
were stored on; the worker's listener thread wakes its loop, which claims there at
once instead of at its next poll (a worker whose queues live on several databases
claims on the named one only: djqueue.worker.database_pacing).

Why UDP, and not PostgreSQL's LISTEN/NOTIFY: it works the same on all three
databases, costs the sender one ``sendto()`` per worker and the database
nothing, and needs no connection held open per listener. A datagram is only a
hint — a lost or forged one costs at most a poll — so polling (``POLL_MAX``)
remains the safety net, and workers the sender cannot reach (another host,
with the default ``WAKE_HOST`` of 127.0.0.1) are found by it.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable

from django.db import DatabaseError

from djqueue.conf import get_settings
from djqueue.polling import local_wakeup
from djqueue.storage import dialects
from djqueue.storage.statements import lookup_statements

logger = logging.getLogger("djqueue.worker")


#: The longest database alias a datagram names, in bytes; a longer one is cut short,
#: so names none.
LONGEST_NAME = 200


class WakeSocket:
    """A worker's listening end. ``named`` hears the database each datagram names (None
    for an empty one, or one that is not a database alias) before the loop is woken."""

    def __init__(self, host: str, named: Callable[[str | None], None] | None = None) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind((host, 0))
        self._socket.settimeout(0.5)
        self.address = "{}:{}".format(*self._socket.getsockname())
        self._named = named

    def listen_until(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                data = self._socket.recv(LONGEST_NAME + 1)
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            if self._named is not None:
                self._named(database_named(data))
            local_wakeup.notify()

    def close(self) -> None:
        self._socket.close()


def database_named(data: bytes) -> str | None:
    """The alias a datagram names; None for an empty or cut one, or one that is not text.
    A name that is not one of the worker's databases wakes them all, as None does."""
    if not data or len(data) > LONGEST_NAME:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


class _WakeAddresses:
    """The sender's cache: queue name -> addresses of the workers serving it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: database -> (when read, queue name -> addresses): workers register on the
        #: database of the queues they serve (djqueue.storage.registration).
        self._by_database: dict[str, tuple[float, dict[str, list[tuple[str, int]]]]] = {}
        self._socket: socket.socket | None = None

    def wake_workers(self, queue_names: Iterable[str]) -> None:
        if get_settings().WAKE_HOST is None:
            return
        by_queue = self._addresses()
        if not by_queue:  # no worker listens: the names need not even be looked up
            return
        addresses = {a for name in queue_names for a in by_queue.get(name, ())}
        if not addresses:
            return
        database = dialects.alias().encode()
        with self._lock:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self._socket.setblocking(False)
            for address in addresses:
                with contextlib.suppress(OSError):  # a full buffer or a gone worker: it polls
                    self._socket.sendto(database, address)

    def forget(self) -> None:
        self._by_database = {}

    def _addresses(self) -> dict[str, list[tuple[str, int]]]:
        db = dialects.alias()
        loaded = self._by_database.get(db)
        if loaded is not None and time.monotonic() - loaded[0] < get_settings().WAKE_REFRESH:
            return loaded[1]
        by_queue: dict[str, list[tuple[str, int]]] = {}
        try:
            for address, queues in lookup_statements.wake_addresses(db):
                host, _, port = address.rpartition(":")
                for name in queues or []:
                    by_queue.setdefault(name, []).append((host, int(port)))
        except (DatabaseError, ValueError):
            logger.warning("Could not read the workers' wake addresses", exc_info=True)
        self._by_database = {**self._by_database, db: (time.monotonic(), by_queue)}
        return by_queue


wake_addresses = _WakeAddresses()
wake_workers = wake_addresses.wake_workers
