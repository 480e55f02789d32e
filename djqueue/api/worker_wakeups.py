"""Waking idle workers in other processes the moment a send commits (or another
change makes messages ready at once: djqueue.api.ready_wakeups).

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
hint — a lost one costs at most a poll — so polling (``POLL_MAX``) remains the
safety net, and workers the sender cannot reach (another host, with the default
``WAKE_HOST`` of 127.0.0.1) are found by it.

After the alias, a datagram lists the queues the send stored on that the receiving
process serves, one a line, when they fit in ``LONGEST_BODY`` bytes (without them it
wakes everything). A worker claims on all its queues anyway; the HTTP API server
wakes only the long polls waiting on those queues (djqueue.http.long_polls), where a
waiter on each of a hundred queues would otherwise claim at every send to any of them.
A listener of an earlier release reads the whole text as an alias it does not know,
which wakes all it serves.

A datagram is signed: it carries an HMAC of its text under a key derived from the
project's ``SECRET_KEY``, and a listener drops one whose tag does not match that key
or one of ``SECRET_KEY_FALLBACKS`` (a rolling deploy's). Anyone who can reach the
port could otherwise turn a flood of datagrams into back-to-back claims on every
database. The tag is the same for every datagram of one text, so it stops
forgery, not a replay by someone who can read the traffic (on loopback, root).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

from django.conf import settings
from django.db import DatabaseError

from djqueue.conf import get_settings
from djqueue.polling import local_wakeup
from djqueue.storage import dialects
from djqueue.storage.statements import lookup_statements

logger = logging.getLogger("djqueue.worker")


#: The longest database alias a datagram names, in bytes (a listener drops a longer one,
#: as it drops an unsigned one: that database's sends are found by polling).
LONGEST_NAME = 200
#: The longest text (alias and queue names) a datagram carries, in bytes: within one
#: packet of a 1,500-byte MTU. Queue names that would not fit are left out.
LONGEST_BODY = 1200
#: A datagram's tag: the first bytes of the HMAC-SHA256 of its alias.
TAG_BYTES = 16
#: Seconds between two warnings about dropped datagrams, at most.
WARN_EVERY = 60.0


class WakeSocket:
    """A worker's listening end. ``named`` hears the database each signed datagram names
    before the loop is woken; one not signed with this project's key is dropped."""

    def __init__(self, host: str, named: Callable[[str], None] | None = None) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind((host, 0))
        self._socket.settimeout(0.5)
        self.address = "{}:{}".format(*self._socket.getsockname())
        self._named = named
        self.checks = DatagramChecks(self.address)

    def listen_until(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                data, sender = self._socket.recvfrom(TAG_BYTES + LONGEST_BODY + 1)
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            wake_up = self.checks.read(data, sender)
            if wake_up is None:
                continue
            if self._named is not None:
                self._named(wake_up.database)
            local_wakeup.notify()

    def close(self) -> None:
        self._socket.close()


class WakeDatagrams(asyncio.DatagramProtocol):
    """An event loop's listening end (the HTTP API server's): ``wake_for`` hears the
    queues each signed datagram names (None: not said, so all); another is dropped."""

    def __init__(self, wake_for: Callable[[frozenset[str] | None], None]) -> None:
        self.wake_for = wake_for
        self.checks: DatagramChecks | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.checks = DatagramChecks("{}:{}".format(*transport.get_extra_info("sockname")[:2]))

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        wake_up = None if self.checks is None else self.checks.read(data, addr)
        if wake_up is not None:
            self.wake_for(wake_up.queues)


class DatagramChecks:
    """A listener's reading of the datagrams it hears: the database a signed one names;
    the others dropped, counted, and said in a warning at most once a minute (a sender
    with another ``SECRET_KEY`` is found only by polling, and should be seen)."""

    def __init__(self, address: str) -> None:
        self.address = address
        #: Datagrams dropped since the last warning.
        self.dropped = 0
        self._warned_at = -WARN_EVERY

    def read(self, data: bytes, sender: object) -> WakeUp | None:
        """What a signed datagram from ``sender`` names; None for another, dropped and
        counted."""
        wake_up = wake_up_read(data)
        if wake_up is None:
            self.dropped += 1
            now = time.monotonic()
            if now - self._warned_at >= WARN_EVERY:
                logger.warning(
                    "Dropped %d wake-up datagram(s) on %s not signed with this project's "
                    "SECRET_KEY, the last from %s: a sender with other settings, or a "
                    "forgery. Sends it meant to announce are found by polling.",
                    self.dropped, self.address, sender)
                self.dropped, self._warned_at = 0, now
        return wake_up


class WakeUp(NamedTuple):
    """What a signed datagram says: the database a send stored on, and the queues it
    stored on (None: not said, so any of the listener's)."""

    database: str
    queues: frozenset[str] | None


def wake_up_datagram(database: str, queues: Iterable[str] = ()) -> bytes:
    """What a sender sends to wake a process: a tag, then the alias of ``database`` and
    the names of ``queues``, a line each (none if they would not fit)."""
    return _signed(settings.SECRET_KEY, database, tuple(sorted(queues)))


@functools.lru_cache(maxsize=256)
def _signed(secret: str | bytes, database: str, queues: tuple[str, ...] = ()) -> bytes:
    text = "\n".join((database, *queues)).encode()
    if len(text) > LONGEST_BODY:
        text = database.encode()
    return _tag(secret, text) + text


def _tag(secret: str | bytes, name: bytes) -> bytes:
    return hmac.digest(_key(secret), name, "sha256")[:TAG_BYTES]


@functools.lru_cache(maxsize=8)
def _key(secret: str | bytes) -> bytes:
    """The wake-ups' own key, derived from ``secret`` (a key used for nothing else)."""
    return hashlib.sha256(b"djqueue.wake-up:" + (
        secret.encode() if isinstance(secret, str) else secret)).digest()


def wake_up_read(data: bytes) -> WakeUp | None:
    """What a signed datagram names; None for one not signed with ``SECRET_KEY`` or a
    fallback, cut short, too long, or not text. A database that is not one of the
    worker's wakes them all."""
    tag, text = data[:TAG_BYTES], data[TAG_BYTES:]
    if not text or len(text) > LONGEST_BODY:
        return None
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())]
    if not any(hmac.compare_digest(tag, _tag(secret, text)) for secret in secrets):
        return None
    try:
        database, *queues = text.decode().split("\n")
    except UnicodeDecodeError:
        return None
    if not database or len(database.encode()) > LONGEST_NAME:
        return None
    return WakeUp(database, frozenset(queues) if queues else None)


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
        served: dict[tuple[str, int], set[str]] = {}  # address -> the queues it serves
        for name in queue_names:
            for address in by_queue.get(name, ()):
                served.setdefault(address, set()).add(name)
        if not served:
            return
        db = dialects.alias()
        with self._lock:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self._socket.setblocking(False)
            for address, names in served.items():
                with contextlib.suppress(OSError):  # a full buffer or a gone worker: it polls
                    self._socket.sendto(wake_up_datagram(db, names), address)

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


def wake_receivers(database: str, queue_names: Iterable[str]) -> None:
    """Wake the idle receivers of ``queue_names``: this process's at once, other
    processes' by datagram. Called once messages on ``database`` became ready (committed)."""
    local_wakeup.notify()
    with dialects.using(database):
        wake_workers(queue_names)
