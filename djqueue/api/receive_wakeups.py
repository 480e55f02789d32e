"""Waking a waiting ``receive()`` the moment a send in another process commits.

A worker is woken by a datagram from the sender (djqueue.api.worker_wakeups); a
process that waits in ``receive(wait=...)`` or ``consume(wait=...)`` is found the
same way. On its first wait it starts one thread, ``djqueue-receive-wakeups``,
which binds a UDP socket on ``WAKE_HOST`` and registers the process in
``djqueue_worker`` as a receiver (a row, a session lock and a heartbeat:
djqueue.storage.registration) naming the queues its receives wait on; it compares
the host's clock with the databases' every CLOCK_CHECK_INTERVAL, as a worker does,
and its row shows the offset (the first receive compared as it claimed). A
datagram bumps the process's local wake-up, which ends the pause of every waiting
receive; each claims at once. Without this, a receive waiting in another process
than the sender's found a message only at its next poll, up to ``POLL_MAX``
(0.5 s) later.

The row names a queue while a receive waits on it and for ``KEPT_FOR`` seconds
after, so a ``consume()`` loop (wait, run, ack, wait again) does not rewrite the
row between its messages; the row itself stays while the process lives, and goes
when it exits (or at :func:`stop`). A sender reads the rows at most every
``WAKE_REFRESH`` seconds, so a receive's first second may pass unannounced:
polling stays the safety net, as it is for a datagram lost or never sent.
``WAKE_HOST = None`` turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator

from django.db import DatabaseError, connections

from djqueue.api.worker_wakeups import WakeSocket
from djqueue.conf import get_settings
from djqueue.models import ProcessKind
from djqueue.storage import host_clock, placement
from djqueue.storage.registration import Registration

logger = logging.getLogger("djqueue.api")
#: Seconds a queue stays named in the row after its last wait ended.
KEPT_FOR = 60.0
#: Seconds between two writes of the row's queue list, at most.
QUEUES_WRITE_EVERY = 0.2


class ReceiveWakeups:
    """This process's receiver row, and the thread that keeps it and hears datagrams."""

    def __init__(self) -> None:
        self._forget()

    def _forget(self) -> None:
        """Start from nothing: at first, and in a forked child, where the parent's thread
        does not run and its row is the parent's."""
        self._lock = threading.Lock()
        #: queue name -> receives waiting on it now.
        self._waiting: Counter[str] = Counter()
        #: queue name -> when its last wait ended (monotonic).
        self._ended: dict[str, float] = {}
        self._changed = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._socket: WakeSocket | None = None
        #: A WAKE_HOST no socket could be bound on (said once; not tried again).
        self._unbound: str | None = None

    @contextlib.contextmanager
    def waiting(self, queue_names: Iterable[str]) -> Iterator[None]:
        """Be woken by sends to ``queue_names`` while inside (a receive's wait)."""
        host = get_settings().WAKE_HOST
        if host is None or self._unbound == host:
            yield
            return
        names = sorted(set(queue_names))
        with self._lock:
            if self._thread is None and not self._started(host):
                names = []
            fresh = [name for name in names if not self._waiting[name]
                     and name not in self._ended]
            self._waiting.update(names)
        if fresh:
            self._changed.set()
        try:
            yield
        finally:
            with self._lock:
                self._waiting.subtract(names)
                now = time.monotonic()
                for name in names:
                    if self._waiting[name] <= 0:
                        del self._waiting[name]
                        self._ended[name] = now

    @property
    def address(self) -> str | None:
        """The address datagrams reach this process at (None before the first wait)."""
        return None if self._socket is None else self._socket.address

    def _started(self, host: str) -> bool:
        """Start the thread (under the lock); False if no socket can be bound on
        ``host`` (said once: its receives find other processes' sends by polling)."""
        try:
            self._socket = WakeSocket(host)
        except OSError as exc:
            self._unbound = host
            logger.warning("A waiting receive cannot take wake-ups on WAKE_HOST %r (%s): "
                           "it finds sends from other processes by polling", host, exc)
            return False
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, args=(self._socket,),
                                        name="djqueue-receive-wakeups", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Stop the thread and delete the row (at exit; a test's teardown)."""
        with self._lock:
            thread, sock = self._thread, self._socket
            self._thread = self._socket = None
            self._ended.clear()
        if thread is None or sock is None:
            return
        self._stopping.set()
        self._changed.set()
        sock.close()
        thread.join(10)

    # The thread

    def _run(self, sock: WakeSocket) -> None:
        listening = threading.Thread(target=sock.listen_until, args=(self._stopping,),
                                     name="djqueue-receive-datagrams", daemon=True)
        listening.start()
        key = uuid.uuid4().hex
        registration = Registration(
            f"receive:{socket.gethostname()[:50]}:{os.getpid()}:{key[:8]}", key, queues=[],
            concurrency=0, held=list, wake_address=sock.address,
            databases=placement.databases(), kind=ProcessKind.RECEIVE)
        written: list[str] = []
        # Its receives stamp lease ends by the database's clock (djqueue.storage.host_clock),
        # as a worker's claims do: the first receive compared the clocks (unless this
        # process had already); from here on this thread compares them, on its connection.
        clock_checks = host_clock.ClockChecks(logger, "Receiver")
        try:
            clock_checks.check_when_due()
            # A row the database refuses now is written by a later heartbeat; meanwhile
            # the receives find other processes' sends by polling.
            registration.register(retried_by_heartbeat=True)
            next_beat = time.monotonic() + get_settings().HEARTBEAT_INTERVAL
            while not self._stopping.is_set():
                try:
                    names = self._names()
                    if names != written:
                        registration.set_queues(names)
                        written = names
                    if time.monotonic() >= next_beat:
                        clock_checks.check_when_due()
                        registration.beat()
                        next_beat = time.monotonic() + get_settings().HEARTBEAT_INTERVAL
                except Exception:  # a database error: the receives poll meanwhile
                    logger.exception("Could not keep this process's receiver row; "
                                     "its receives poll until it is back")
                    _close_connections()
                    self._stopping.wait(get_settings().HEARTBEAT_INTERVAL)
                    continue
                self._changed.wait(min(get_settings().HEARTBEAT_INTERVAL, KEPT_FOR))
                self._changed.clear()
                self._stopping.wait(QUEUES_WRITE_EVERY)
        finally:
            registration.deregister()
            _close_connections()
            listening.join(1)

    def _names(self) -> list[str]:
        """The queues the row names now: waited on, or waited on less than KEPT_FOR ago."""
        with self._lock:
            gone = time.monotonic() - KEPT_FOR
            for name in [n for n, ended in self._ended.items() if ended < gone]:
                del self._ended[name]
            return sorted({*self._waiting, *self._ended})


def _close_connections() -> None:
    for db in placement.databases():
        with contextlib.suppress(DatabaseError):
            connections[db].close()


receive_wakeups = ReceiveWakeups()
atexit.register(receive_wakeups.stop)
os.register_at_fork(after_in_child=receive_wakeups._forget)
