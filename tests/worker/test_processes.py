"""Real worker, reaper and producer processes receiving real signals."""

import itertools
import os
import random
import re
import signal
import time
from collections import Counter

import pytest
from django.db.models import Count
from django.utils import timezone

import djqueue
from djqueue.models import History, Message, ProcessKind, State, Worker
from tests.conftest import kill, wait_until
from tests.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def effects_per_key(positive_only: bool = True) -> Counter:
    rows = Effect.objects.filter(key__gte=0) if positive_only else Effect.objects.all()
    return Counter(dict(rows.values_list("key").annotate(c=Count("id")).values_list("key", "c")))


#: Messages the four producers send: `make test` 8,000, as the test runs on seven
#: database set-ups (on the two-core machine 20,000 took ~40 s beside another suite,
#: and 8,000 took 13 s alone on PostgreSQL); `make soak` 100,000.
PRODUCED = int(os.environ.get("DJQUEUE_PRODUCED_TOTAL", "8000"))


def test_four_producers_four_workers_process_each_message_exactly_once(spawn):
    djqueue.create_queue("t.record")
    total, producers = PRODUCED, 4
    workers = [spawn("djqueue_worker", "t.record", "-c", "2", "-b", "20") for _ in range(4)]
    share = total // producers
    feeds = [spawn("produce", "t.record", "--start", str(i * share), "--count", str(share))
             for i in range(producers)]
    for feed in feeds:
        assert feed.wait(300) == 0, feed.output()
    wait_until(lambda: History.objects.count() == total, 300, "all messages acked")
    assert not Message.objects.exists()
    counts = effects_per_key()
    assert set(counts) == set(range(total)), "lost messages"
    assert set(counts.values()) == {1}, "messages processed twice"
    for worker in workers:
        assert worker.popen.poll() is None, worker.output()
        worker.signal(signal.SIGTERM)
    assert [w.wait(30) for w in workers] == [0, 0, 0, 0]
    assert not Worker.objects.exists()


def test_max_messages_claims_no_more_than_it_may_process(spawn):
    djqueue.create_queue("t.record")
    djqueue.send_batch("t.record", [{"n": i} for i in range(300)])
    worker = spawn("djqueue_worker", "t.record", "-c", "1", "-b", "100", "--max-messages", "150")
    assert worker.wait(60) == 0, worker.output()
    assert History.objects.count() == 150
    # Never claimed, so never released either (a release keeps claimed_at).
    assert Message.objects.filter(state=State.READY, claimed_at__isnull=True).count() == 150


def test_sigterm_finishes_running_handlers_and_releases_the_rest_at_once(spawn):
    djqueue.create_queue("t.slow", visibility_timeout=300)
    djqueue.send_batch("t.slow", [{"n": i, "sleep": 3} for i in range(1, 5)])
    worker = spawn("djqueue_worker", "t.slow", "-c", "2", "-b", "4", "--shutdown-grace", "30")
    wait_until(lambda: Effect.objects.filter(key__lt=0).count() == 2, 30, "two handlers running")
    assert Message.objects.filter(state=State.CLAIMED).count() == 4
    worker.signal(signal.SIGTERM)
    wait_until(lambda: Message.objects.filter(state=State.READY).count() == 2, 2.5,
               "unstarted messages released")
    assert not Effect.objects.filter(key__gte=0).exists(), "released only after handlers ended"
    assert worker.wait(30) == 0, worker.output()
    done = effects_per_key()
    assert len(done) == 2 and set(done.values()) == {1}
    assert History.objects.count() == 2
    ready = Message.objects.filter(state=State.READY)
    assert ready.count() == 2 and {m.attempts for m in ready} == {0}
    assert not Worker.objects.exists()


def test_second_signal_exits_without_waiting_for_handlers(spawn):
    djqueue.create_queue("t.slow", visibility_timeout=300)
    djqueue.send("t.slow", {"n": 1, "sleep": 60})
    worker = spawn("djqueue_worker", "t.slow", "--shutdown-grace", "60")
    wait_until(lambda: Effect.objects.filter(key=-1).exists(), 30, "the handler to start")
    worker.signal(signal.SIGTERM)
    worker.signal(signal.SIGINT)
    assert worker.wait(15) == 0
    assert Message.objects.get().state == State.READY
    assert not Worker.objects.exists()


def test_sigkilled_workers_claims_are_processed_by_another_within_10s(spawn):
    djqueue.create_queue("t.slow", visibility_timeout=600)
    # First deliveries take 10 minutes: the victim sits on all 50 claims.
    djqueue.send_batch("t.slow", [{"n": i, "sleep": 600} for i in range(1, 51)])
    victim = spawn("djqueue_worker", "t.slow", "-c", "1", "-b", "50")
    wait_until(lambda: Message.objects.filter(state=State.CLAIMED).count() == 50, 30,
               "the victim to claim 50 messages")
    owner = Message.objects.filter(state=State.CLAIMED).values_list("owner", flat=True)[0]
    spawn("djqueue_reaper")
    rescuer = spawn("djqueue_worker", "t.slow", "-c", "2")
    wait_until(lambda: Worker.objects.filter(kind=ProcessKind.WORKER).count() == 2, 30,
               "the rescuer to register")
    killed_at = time.monotonic()
    kill(victim)
    wait_until(lambda: History.objects.count() == 50, 10, "all 50 processed by the rescuer")
    elapsed = time.monotonic() - killed_at
    assert set(History.objects.values_list("attempts", flat=True)) == {2}
    assert not History.objects.filter(worker=owner).exists()
    # Deleted by the reaper just after the claims' return commits (see the reaper).
    wait_until(lambda: not Worker.objects.filter(pk=owner).exists(), 10,
               "the killed worker's row deleted")
    print(f"recovered 50 claims of a SIGKILLed worker in {elapsed:.2f}s")
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(30) == 0


def test_exactly_once_survives_random_sigkills(spawn):
    djqueue.create_queue("t.exactly", exactly_once=True, visibility_timeout=30,
                         max_attempts=1000)
    total, planned = 400, 6
    djqueue.send_batch("t.exactly", [{"n": i} for i in range(total)])
    spawn("djqueue_reaper")
    workers = [spawn("djqueue_worker", "t.exactly", "-c", "2", "-b", "5") for _ in range(2)]
    done = History.objects.count

    def holding_claims() -> list[int]:
        """The slots whose worker owns a claimed message right now."""
        owners = set(Message.objects.filter(state=State.CLAIMED).values_list("owner", flat=True))
        return [slot for slot, worker in enumerate(workers)
                if any(f":{worker.pid}:" in (owner or "") for owner in owners)]

    rng = random.Random(20261122)
    # The kills are spaced by progress, not by the clock: the kth waits until k/(planned+2)
    # of the messages are done, so a fast machine cannot finish the queue between kills
    # (a run once made only 2 kills before 400 messages were done). Each kill takes a
    # worker that holds claims, 0-20 ms after it was seen to, so that it lands before,
    # inside or after a handler's insert in the ack transaction.
    for k in range(1, planned + 1):
        wait_until(lambda k=k: done() >= k * total // (planned + 2), 240,
                   f"{k}/{planned + 2} of the messages done", progress=done)
        slot = rng.choice(wait_until(holding_claims, 60, "a worker holding claims"))
        time.sleep(rng.uniform(0, 0.02))  # where in the handler the kill lands, not a wait
        kill(workers[slot])
        workers[slot] = spawn("djqueue_worker", "t.exactly", "-c", "2", "-b", "5")
    wait_until(lambda: done() == total, 240, "every message acked", progress=done)
    counts = effects_per_key()
    assert set(counts) == set(range(total))
    assert set(counts.values()) == {1}, {k: c for k, c in counts.items() if c != 1}
    redelivered = History.objects.filter(attempts__gt=1).count()
    assert redelivered >= 1, "no kill caught a claim"
    print(f"{planned} SIGKILLs, {redelivered} of {total} messages delivered again, "
          "each side effect exactly once")


def test_failing_handler_walks_backoff_to_dead_letters_then_redrive_succeeds(spawn):
    dlq = djqueue.create_queue("t.flaky.dead")
    schedule = [0.3, 0.6, 0.9]
    djqueue.create_queue("t.flaky", backoff=schedule, max_attempts=4, dead_letter_queue=dlq)
    message = djqueue.send("t.flaky", {"n": 7, "failures": 4})
    worker = spawn("djqueue_worker", "t.flaky", env={"DJQUEUE_TEST_LOG_INFO": "1"})
    dead = wait_until(lambda: Message.objects.filter(queue=dlq, state=State.DEAD).first(), 30,
                      "the message to be dead-lettered")
    assert dead.pk == message.pk and dead.attempts == 4
    assert [e["attempt"] for e in dead.errors] == [1, 2, 3, 4]
    assert all("planned failure" in e["error"] for e in dead.errors)
    runs = list(Effect.objects.filter(key=7).order_by("attempt"))
    assert [r.attempt for r in runs] == [1, 2, 3, 4]
    gaps = [(b.at - a.at).total_seconds() for a, b in itertools.pairwise(runs)]
    for gap, step in zip(gaps, schedule, strict=True):
        assert step <= gap < step + 1.5, (gaps, schedule)
    assert djqueue.redrive("t.flaky.dead") == 1
    wait_until(lambda: History.objects.filter(pk=message.pk).exists(), 30, "redriven success")
    assert Effect.objects.filter(key=7).count() == 5
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    # The log says what became of each failed run, with the exception, and sums up.
    log = worker.output()
    assert "started on t.flaky: 1 handler thread, claims sized to the backlog\n" in log, log
    for attempt, step in enumerate(schedule, 1):
        retried = re.search(rf"Message {message.pk} of t\.flaky failed on attempt "
                            rf"{attempt}; retrying in ([0-9.]+) s: ValueError: planned failure "
                            rf"on attempt {attempt}\n", log)
        assert retried and step <= float(retried[1]) <= step * 1.1 + 0.05, log
    assert re.search(rf"Message {message.pk} of t\.flaky failed on attempt 4 and was "
                     r"dead-lettered to t\.flaky\.dead: ValueError: planned failure on "
                     r"attempt 4\n", log), log
    assert re.search(r"stopped after [0-9.]+ s, 5 claimed in \d+ claims \(0 failed\), 1 acked, "
                     r"4 failed, 0 postponed, 0 released, 0 lost\n", log), log



def lock_holder(key: str):
    """The connection (MySQL) or backend pid (PostgreSQL) holding session lock ``key``."""
    from django.db import connection

    from djqueue.storage import session_locks

    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute("SELECT IS_USED_LOCK(%s)", [f"djqueue:{key}"])
        else:
            unsigned = session_locks._pg_key(key) & (2**64 - 1)
            cursor.execute("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND "
                           "classid = %s AND objid = %s AND objsubid = 1",
                           [unsigned >> 32, unsigned & (2**32 - 1)])
        row = cursor.fetchone()
        return row[0] if row else None


def test_live_workers_session_lock_is_held_by_one_connection_across_heartbeats(spawn):
    from djqueue.storage import session_locks

    if not session_locks.has_session_locks():
        pytest.skip("SQLite has no session locks")
    djqueue.create_queue("t.record")
    spawn("djqueue_worker", "t.record")
    worker = wait_until(lambda: Worker.objects.first(), 30, "the worker to register")
    holder = wait_until(lambda: lock_holder(worker.lock_key), 5, "the lock holder")
    deadline = time.monotonic() + 3  # six heartbeats at HEARTBEAT_INTERVAL = 0.5 s
    while time.monotonic() < deadline:
        assert lock_holder(worker.lock_key) == holder, "the lock was re-acquired"
        assert session_locks.session_lock_free(worker.lock_key) is False
    assert Worker.objects.get().pk == worker.pk


def end_session(holder: int) -> None:
    """End the database session ``holder`` (a MySQL connection id, a PostgreSQL backend
    pid) from the server's side, as a DBA, a timeout or a proxy would."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute("KILL CONNECTION %s", [holder])
        else:
            cursor.execute("SELECT pg_terminate_backend(%s)", [holder])


def test_a_worker_whose_session_lock_another_session_holds_takes_it_back_once_free(spawn):
    """The worker's lock connection dies, and for a while another session holds its lock
    (the old one, half-open, which the server has not yet seen die). The heartbeat must
    go on, and take the lock back once it is free, even if the reaper deleted the row
    meanwhile. It used to keep the connection that failed to get the lock and take it
    for the holder, never trying again; and registering the row again raised out of the
    heartbeat thread and ended it. Either way the reaper would then have seen a free
    lock, or a stale heartbeat, and returned the claims of a live worker."""
    from djqueue.storage import session_locks

    if not session_locks.has_session_locks():
        pytest.skip("SQLite has no session locks")
    djqueue.create_queue("t.record")
    worker = spawn("djqueue_worker", "t.record")
    row = wait_until(lambda: Worker.objects.first(), 30, "the worker to register")
    rows = Worker.objects.filter(pk=row.pk)

    def held_elsewhere_until(while_held) -> None:
        stale = session_locks.SessionLock(row.lock_key)

        def taken_over() -> bool:
            holder = lock_holder(row.lock_key)
            if holder is not None:
                end_session(holder)  # the heartbeat may take it back first: end that too
            return stale.acquire()

        wait_until(taken_over, 30, "another session to hold the worker's lock", interval=0)
        try:
            while_held()
        finally:
            stale.close()
        wait_until(lambda: lock_holder(row.lock_key) is not None and rows.exists(), 30,
                   f"the worker to hold its lock and row again\n{worker.output()}")

    def beats() -> None:
        since = timezone.now()
        wait_until(lambda: rows.filter(heartbeat_at__gt=since).exists(), 30,
                   "a heartbeat while the lock is held elsewhere")

    def row_deleted() -> None:
        rows.delete()
        wait_until(lambda: "registering again" in worker.output(), 30,
                   "a heartbeat to find the row gone")

    held_elsewhere_until(beats)
    held_elsewhere_until(row_deleted)
    djqueue.send("t.record", {"n": 1})
    wait_until(lambda: History.objects.count() == 1, 30, "the worker to go on working")


def a_worker_holding_two_long_claims(spawn) -> tuple:
    """A worker process running two handlers that sleep 600 s, and its row.

    Returned once both handlers have written their start (and so use the database no
    more): behind a pooler in transaction mode, ending the server session that holds
    the worker's lock also fails whatever client transaction runs on that session at
    that moment, and a handler's first insert failed so (a clean-clone run, once)."""
    djqueue.create_queue("t.slow", visibility_timeout=600)
    djqueue.send_batch("t.slow", [{"n": i, "sleep": 600} for i in (1, 2)])
    worker = spawn("djqueue_worker", "t.slow", "-c", "2", "-b", "2")
    wait_until(lambda: Message.objects.filter(state=State.CLAIMED).count() == 2
               and Effect.objects.filter(key__in=(-1, -2)).count() == 2, 30,
               "the worker to claim both messages and start their handlers")
    return worker, Worker.objects.get()


def test_a_lock_lost_for_a_moment_keeps_the_claims_and_a_frozen_workers_come_back(spawn,
                                                                                   caplog):
    """A live worker's session lock frees when only its lock's session ends (a server
    restart, a KILL, a proxy): the reaper must leave its claims to it until its next
    heartbeat takes the lock back. It returned them at its first look (here, on the old
    code: the first tick found one dead worker), and the handlers still running them
    ran them a second time. A worker frozen with its lock gone is dead once its lock has
    stayed free for two heartbeat intervals, not only after WORKER_TIMEOUT."""
    from djqueue.maintenance.reaper import Reaper
    from djqueue.storage import session_locks

    if not session_locks.has_session_locks():
        pytest.skip("SQLite has no session locks")
    worker, row = a_worker_holding_two_long_claims(spawn)
    claims = Message.objects.filter(state=State.CLAIMED, owner=row.pk, attempts=1)
    reaper = Reaper()

    def end_lock_session() -> None:
        end_session(wait_until(lambda: lock_holder(row.lock_key), 10, "the lock's holder"))
        wait_until(lambda: session_locks.session_lock_free(row.lock_key), 10,
                   "the server to free the lock")

    end_lock_session()
    assert reaper.tick().dead_workers == 0
    assert claims.count() == 2
    wait_until(lambda: lock_holder(row.lock_key) is not None, 10,
               f"the heartbeat to take the lock back\n{worker.output()}")
    assert reaper.tick().dead_workers == 0
    assert claims.count() == 2 and Worker.objects.filter(pk=row.pk).exists()

    worker.signal(signal.SIGSTOP)  # frozen: no heartbeat takes the lock back
    try:
        end_lock_session()
        with caplog.at_level("WARNING", logger="djqueue.reaper"):
            wait_until(lambda: reaper.tick().dead_workers == 1, 30,
                       "the reaper to take the frozen worker for dead", interval=0.1)
        assert f"Worker {row.pk} on default is dead (its session lock free for" in caplog.text
        assert Message.objects.filter(state=State.READY, attempts=1).count() == 2
    finally:
        kill(worker)


def test_a_reaper_in_another_pid_namespace_leaves_a_live_workers_claims(spawn):
    """A container run with the host's network has the host's hostname but pids of its
    own. A reaper there looked the worker's pid up in its own namespace, found it gone and
    returned the claims of a worker still running them (here, on the old code: "dead
    workers 1" and both messages ready again). The row now says the worker's boot and pid
    namespace, and the pid is looked up only where they are the reaper's."""
    worker, row = a_worker_holding_two_long_claims(spawn)
    assert row.pid == worker.pid and row.pid_namespace.endswith(os.readlink("/proc/self/ns/pid"))
    reaper = spawn("djqueue_reaper", "--once",
                   prefix=("unshare", "--pid", "--fork", "--mount-proc"))
    status = reaper.wait(60)
    if status and "unshare failed" in reaper.output():  # no CAP_SYS_ADMIN (not root)
        pytest.skip(f"cannot make a pid namespace here: {reaper.output()}")
    assert status == 0 and "dead workers 0," in reaper.output(), reaper.output()
    assert Message.objects.filter(state=State.CLAIMED, owner=row.pk).count() == 2
    assert worker.popen.poll() is None, worker.output()


def test_stuck_handler_threads_make_the_worker_restart_its_process_and_carry_on(spawn):
    """Handlers hanging past --time-limit leave threads Python cannot stop; past
    --max-stuck of them the worker re-executes itself (same pid) and goes on."""
    dead = djqueue.create_queue("f.poison.dead")
    djqueue.create_queue("f.poison", max_attempts=1, dead_letter_queue=dead)
    djqueue.send_batch("f.poison", [{"n": i, "kind": "hang"} for i in range(3)])
    worker = spawn("djqueue_worker", "f.poison", "-c", "1", "-b", "1", "--time-limit", "0.3",
                   "--max-stuck", "2")
    wait_until(lambda: Message.objects.filter(state=State.DEAD).count() == 3, 60,
               "three hung deliveries dead-lettered")
    djqueue.send("f.poison", {"n": 99})
    wait_until(lambda: History.objects.filter(pk__isnull=False).count() == 1, 60,
               f"the good message after the restart\n{worker.output()}")
    assert worker.popen.poll() is None, worker.output()
    assert worker.output().count("stopping so the process starts afresh") == 1
    errors = [m.errors[-1]["error"] for m in Message.objects.filter(state=State.DEAD)]
    assert all("TimeLimitExceeded" in e for e in errors), errors
    assert Effect.objects.filter(key=99).count() == 1


def test_past_max_rss_the_worker_finishes_what_it_holds_and_starts_afresh(spawn, tmp_path):
    """A handler keeping 40 MB a message, 480 MB in all: past --max-rss the worker stops
    claiming, finishes its messages and re-executes itself (same pid), which gives the
    memory back; every message runs once, none waits out a lease. Its --alive-file is
    kept through the restart, as through a reload, for a probe to find."""
    djqueue.create_queue("t.leak", visibility_timeout=300)
    djqueue.send_batch("t.leak", [{"n": i, "mb": 40} for i in range(12)])
    path = tmp_path / "worker.alive"
    worker = spawn("djqueue_worker", "t.leak", "-c", "1", "-b", "2", "--max-rss", "320",
                   "--alive-file", str(path), env={"DJQUEUE_TEST_LOG_INFO": "1"})
    wait_until(path.exists, 60, "its alive file")
    inode = path.stat().st_ino

    def resident() -> int:
        with open(f"/proc/{worker.pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def settled() -> bool:
        """Every message finished, and the process at work is a fresh one under the limit
        (the 40 MB blocks went with the exec)."""
        log = worker.output()
        restarts = log.count("then starting the process afresh")
        return (History.objects.count() == 12 and restarts >= 1
                and log.count("started on t.leak") == restarts + 1 and resident() < 320 << 20)

    wait_until(settled, 120, "every message finished and a fresh process at work",
               progress=lambda: (History.objects.count(), len(worker.output())))
    assert worker.popen.poll() is None, worker.output()
    effects = list(Effect.objects.values_list("key", "attempt", "pid"))
    assert sorted(key for key, _, _ in effects) == list(range(12))
    assert {(attempt, pid) for _, attempt, pid in effects} == {(1, worker.pid)}
    assert not Message.objects.exists()
    assert path.stat().st_ino == inode  # not removed as the process ran anew


def test_a_stop_signal_during_a_recycles_drain_ends_the_worker(spawn):
    """Past --max-rss the worker drains to start afresh; a SIGTERM meanwhile (a service
    manager stopping it) is the first stop asked for: the running handler finishes, and
    the process exits rather than running anew."""
    djqueue.create_queue("t.slow", visibility_timeout=300)
    djqueue.create_queue("t.leak", visibility_timeout=300)
    worker = spawn("djqueue_worker", "t.slow", "t.leak", "-c", "2", "--max-rss", "320",
                   env={"DJQUEUE_TEST_LOG_INFO": "1"})
    djqueue.send("t.slow", {"n": 1, "sleep": 4})
    wait_until(lambda: Effect.objects.filter(key=-1).exists(), 60, "the 4 s handler running")
    djqueue.send("t.leak", {"n": 2, "mb": 400})
    wait_until(lambda: "then starting the process afresh" in worker.output(), 60,
               "the recycle's drain")
    assert not Effect.objects.filter(key=1).exists(), "the 4 s handler still running"
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output()
    assert effects_per_key() == {1: 1, 2: 1}
    assert worker.output().count("started on t.slow") == 1, worker.output()


def test_a_max_rss_below_the_workers_own_start_is_refused(spawn):
    djqueue.create_queue("t.leak")
    refused = spawn("djqueue_worker", "t.leak", "--max-rss", "5")
    assert refused.wait(60) == 1
    assert "--max-rss 5 MB is below the" in refused.output()
    supervised = spawn("djqueue_worker", "t.leak", "--processes", "2", "--max-rss", "5")
    assert supervised.wait(60) == 1
    assert "--max-rss 5 MB is below the" in supervised.output()
    assert spawn("djqueue_worker", "t.leak", "--max-rss", "0").wait(60) == 2
