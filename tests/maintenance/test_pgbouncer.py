"""Workers and the reaper behind PgBouncer in transaction mode, the pooler many
PostgreSQL projects put in front of their server.

In that mode a client's statements run on whichever server session is free, so a
session's state (an advisory lock among it) outlives the client's statement and is
seen by the next client the pooler hands that session to. The reaper must still never
take a live worker for dead (djqueue.storage.session_locks.session_lock_free), and a
dead one's claims must still come back. Each test starts its own PgBouncer
(tests/pgbouncer.py) on a loopback port in front of the test server, and stops it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from django.db import connection

import djqueue
from djqueue.models import History, Message, ProcessKind, State, Worker
from djqueue.storage import session_locks
from tests.conftest import vendor, wait_until
from tests.models import Effect
from tests.pgbouncer import PORT_VARIABLE, running

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(vendor() != "postgresql", reason="PostgreSQL only")]


@pytest.fixture
def pgbouncer() -> Iterator[int]:
    """A PgBouncer in transaction mode with a pool of two server sessions, in front of
    the test database's server; yields its port."""
    with running(connection.settings_dict, pool_size=2) as port:
        yield port


def _pooled(port: int) -> psycopg.Connection:
    settings = connection.settings_dict
    return psycopg.connect(host="127.0.0.1", port=port, user=settings["USER"] or "postgres",
                           dbname=settings["NAME"], autocommit=True)


def test_a_lock_taken_through_the_pooler_is_never_seen_free_through_it(pgbouncer):
    """The reaper's probe, through the pooler, lands on the very server session that
    holds a worker's lock; advisory locks being re-entrant, a try-lock there succeeded,
    and the live worker was taken for dead. The probe reads pg_locks instead."""
    key, other = "d00dfeed" * 4, "feedd00d" * 4
    holder = _pooled(pgbouncer)  # as a worker's lock connection would be
    probe = connection.copy()  # Django's connection, through the pooler
    probe.settings_dict = {**probe.settings_dict, "PORT": str(pgbouncer)}
    try:
        assert holder.execute("SELECT pg_try_advisory_lock(%s)",
                              [session_locks._pg_key(key)]).fetchone()[0] is True
        # With two server sessions, most probes run on the holder's.
        assert [session_locks.session_lock_free(key, probe) for _ in range(20)] == [False] * 20
        # A lock held on a direct connection reads held through the pooler, and free
        # once released.
        direct = session_locks.SessionLock(other)
        assert direct.acquire() is True
        assert session_locks.session_lock_free(other, probe) is False
        direct.close()
        assert session_locks.session_lock_free(other, probe) is True
    finally:
        probe.close()
        holder.close()


def workers():
    """The worker processes' rows (a running reaper has one too)."""
    return Worker.objects.filter(kind=ProcessKind.WORKER)


def _through(port: int) -> dict[str, str]:
    return {PORT_VARIABLE: str(port)}


def test_a_live_worker_behind_the_pooler_keeps_its_claims_while_the_reaper_runs(
        spawn, pgbouncer):
    djqueue.create_queue("t.slow", visibility_timeout=300)
    djqueue.send_batch("t.slow", [{"n": n, "sleep": 0.2} for n in range(1, 41)])
    reaper = spawn("djqueue_reaper", env=_through(pgbouncer))
    worker = spawn("djqueue_worker", "t.slow", "-c", "4", "-b", "4", env=_through(pgbouncer))
    wait_until(lambda: History.objects.count() == 40, 120,
               f"40 messages done\n{worker.output()}\n{reaper.output()}",
               progress=History.objects.count)
    # The reaper cycled (every 0.2 s) all along the drain; had it taken the worker for
    # dead, it would have returned its claims and deleted its row.
    attempts = sorted(History.objects.values_list("attempts", flat=True).distinct())
    assert attempts == [1], f"claims were returned from a live worker: attempts {attempts}"
    assert not Effect.objects.filter(attempt__gt=1).exists()
    assert workers().count() == 1
    assert "reaped" not in worker.output(), worker.output()
    assert reaper.popen.poll() is None and worker.popen.poll() is None
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


def test_a_killed_workers_claims_come_back_behind_the_pooler(spawn, pgbouncer):
    djqueue.create_queue("t.slow", visibility_timeout=300)
    djqueue.send_batch("t.slow", [{"n": n, "sleep": 60} for n in range(1, 5)])
    spawn("djqueue_reaper", env=_through(pgbouncer))
    worker = spawn("djqueue_worker", "t.slow", "-c", "4", "-b", "4", env=_through(pgbouncer))
    wait_until(lambda: Effect.objects.filter(key__lt=0).count() == 4, 60, "four handlers running")
    worker.popen.send_signal(signal.SIGKILL)
    worker.popen.wait(10)
    # Its lock may live on in a pooled server session; the reaper then knows the death
    # from the process (same host) or, from another host, by the stopped heartbeat
    # (WORKER_TIMEOUT).
    wait_until(lambda: Message.objects.filter(state=State.READY).count() == 4, 30,
               "the killed worker's claims back")
    # The reaper deletes the row only after the transaction that returned the claims
    # has committed (it keeps the row while any claim is still locked), so the row
    # goes a moment after the claims come back.
    wait_until(lambda: not workers().exists(), 30, "the killed worker's row deleted")


def test_a_live_worker_whose_lock_session_ended_takes_its_lock_again(spawn, pgbouncer):
    """Behind the pooler a worker's lock lives in a pooled server session, which another
    client's death in a transaction (or an operator) can end while the worker's own
    connection, to the pooler, still answers. The worker went on without its lock, and
    the reaper took it for dead two heartbeat intervals later and returned its claims
    (in make test: a workflow step ran twice). Its heartbeat now sees the lock free and
    takes it again, within one interval."""
    djqueue.create_queue("t.slow", visibility_timeout=300)
    djqueue.send_batch("t.slow", [{"n": n, "sleep": 60} for n in range(1, 3)])
    reaper = spawn("djqueue_reaper", env=_through(pgbouncer))
    worker = spawn("djqueue_worker", "t.slow", "-c", "2", "-b", "2", env=_through(pgbouncer))
    wait_until(lambda: Effect.objects.filter(key__lt=0).count() == 2, 60, "two handlers running")
    key = workers().get().lock_key
    high, low = session_locks._pg_halves(key)
    with connection.cursor() as cursor:  # straight to the server, not through the pooler
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
            "AND granted AND classid::bigint = %s AND objid::bigint = %s", [high, low])
        assert [row[0] for row in cursor.fetchall()] == [True]
    wait_until(lambda: session_locks.session_lock_free(key) is False, 10,
               f"the worker to take its lock again\n{worker.output()}")
    # The reaper's verdict needs the lock free for two heartbeat intervals (1 s here):
    # past them, with a pass every 0.2 s, the worker keeps its row and its claims.
    beats = workers().get().heartbeat_at
    wait_until(lambda: workers().get().heartbeat_at > beats, 10, "a heartbeat after")
    wait_until(lambda: workers().get().heartbeat_at > beats + timedelta(seconds=1), 10,
               "two more heartbeat intervals")
    assert Message.objects.filter(state=State.CLAIMED).count() == 2
    assert "is dead" not in reaper.output(), reaper.output()
