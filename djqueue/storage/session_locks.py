"""Session locks: a worker holds one for its lifetime on a connection of its own.

When the process dies its connection closes and the server frees the lock at
once, so the reaper learns of the death without waiting for heartbeats to go
silent (Q4M's "a message returns when its owner's connection dies"); it waits two
heartbeat intervals, in which a live process whose lock's connection alone broke
takes the lock back (djqueue.maintenance.dead_workers). MariaDB/MySQL name the
lock (``GET_LOCK``); PostgreSQL takes an advisory lock on a 64-bit key; SQLite
has none (its workers are found dead by their heartbeats alone). Behind a pooler in
transaction mode a dead worker's lock can live on in a pooled server session; then
its heartbeat tells. And a live worker's can end with that session while its own
connection, to the pooler, answers: its heartbeat reads the lock in ``pg_locks`` and
takes it again (SessionLock.is_alive; docs/operations.md, "PostgreSQL behind
PgBouncer").
"""

from __future__ import annotations

import contextlib
import hashlib

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.conf import get_settings
from djqueue.storage.dialects import alias, connection


def _mysql_name(key: str, conn: BaseDatabaseWrapper) -> str:
    """The lock's name on MySQL/MariaDB, whose named locks are the whole server's.

    Why the database in it: a worker serving queues on two databases of one server
    holds a lock on each (djqueue.storage.registration); with one name the second
    GET_LOCK would find the first holding it. The home database keeps the plain
    name, so reapers and workers of earlier versions still agree on it.
    """
    if conn.alias == get_settings().DATABASE:
        return f"djqueue:{key}"
    schema = hashlib.sha256(str(conn.settings_dict["NAME"]).encode()).hexdigest()[:8]
    return f"djqueue:{key}:{schema}"


def _pg_key(key: str) -> int:
    """A signed 64-bit advisory lock key from the first 16 hex digits of ``key``."""
    value = int(key[:16], 16)
    return value - (1 << 64) if value >= 1 << 63 else value


def _pg_halves(key: str) -> tuple[int, int]:
    """The two 32-bit halves of :func:`_pg_key`'s key, as ``pg_locks`` shows an advisory
    lock taken on a 64-bit key: the high half as ``classid``, the low as ``objid``."""
    return int(key[:8], 16), int(key[8:16], 16)


def has_session_locks(conn: BaseDatabaseWrapper | None = None) -> bool:
    conn = conn or connection()
    return conn.vendor in {"mysql", "postgresql"}


class SessionLock:
    """A named lock held on a connection of its own until released or the process dies."""

    def __init__(self, key: str, db_alias: str | None = None) -> None:
        self.key = key
        self.alias = db_alias or alias()
        self._conn: BaseDatabaseWrapper | None = None

    def acquire(self) -> bool:
        """Take the lock (again, after a lost connection). False if someone else has it,
        and then no connection is kept: ``is_alive`` says it is not held, so the next
        heartbeat tries again (else a live connection that never got the lock would pass
        for its holder, and the worker would run on without it)."""
        if not has_session_locks(connections[self.alias]):
            return True
        self.close()
        self._conn = connections.create_connection(self.alias)
        # Why: the lock is taken on the worker's main thread and probed from its
        # heartbeat thread. Without this Django refuses the probe, the heartbeat
        # takes it for a lost connection and re-acquires, and in that instant the
        # lock is free: a reaper would declare a live worker dead.
        self._conn.inc_thread_sharing()
        self._conn.ensure_connection()
        with self._conn.cursor() as cursor:
            if self._conn.vendor == "mysql":
                cursor.execute("SELECT GET_LOCK(%s, 0)", [_mysql_name(self.key, self._conn)])
            else:
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [_pg_key(self.key)])
            held = bool(cursor.fetchone()[0])
        if not held:  # nothing to release: PostgreSQL would warn of an unlock of no lock
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        return held

    def is_alive(self) -> bool:
        """Whether the holding connection still answers and, on PostgreSQL, the lock is
        still held. Behind a pooler in transaction mode the lock lives in a pooled server
        session that other clients use too: when that session ends (another client died
        in a transaction on it, or it was terminated) the lock goes with it while this
        connection, to the pooler, still answers. The reaper would then take the live
        worker for dead after two heartbeat intervals and return its claims; seen free
        here, the lock is taken again at this heartbeat, within one."""
        if self._conn is None:
            return not has_session_locks(connections[self.alias])
        try:
            if self._conn.vendor == "postgresql":
                return session_lock_free(self.key, self._conn) is False
            with self._conn.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except DatabaseError:
            return False

    def close(self) -> None:
        """Release the lock, then close its connection.

        Why release first: closing alone frees the lock only once the server has
        processed the disconnect, a moment later; a prober right after would
        still see it held.
        """
        if self._conn is not None:
            with contextlib.suppress(Exception), self._conn.cursor() as cursor:
                if self._conn.vendor == "mysql":
                    cursor.execute("SELECT RELEASE_LOCK(%s)",
                                   [_mysql_name(self.key, self._conn)])
                else:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [_pg_key(self.key)])
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None


def session_lock_free(key: str, conn: BaseDatabaseWrapper | None = None) -> bool | None:
    """Whether nobody holds the session lock ``key``; None where there are no session locks."""
    conn = conn or connection()
    if not has_session_locks(conn):
        return None
    if conn.vendor == "mysql":
        with conn.cursor() as cursor:
            cursor.execute("SELECT IS_FREE_LOCK(%s)", [_mysql_name(key, conn)])
            return bool(cursor.fetchone()[0])
    # Why the lock table, not a try-lock: advisory locks are re-entrant, so a try by
    # the very session that holds the lock succeeds. Behind a pooler in transaction
    # mode (PgBouncer's most common setting) the prober's statement may run on the
    # server session that took the worker's lock, and a live worker would look dead
    # to the reaper: 50 probes of 50 did through PgBouncer 1.18 with an idle pool.
    # pg_locks shows the lock held, whichever session reads it.
    high, low = _pg_halves(key)
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
            "AND granted AND objsubid = 1 AND classid::bigint = %s AND objid::bigint = %s "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
            [high, low])
        return bool(cursor.fetchone()[0])
