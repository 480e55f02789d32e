"""Claims on two connections: a locked message is skipped, not waited on."""

import contextlib
import threading

import pytest
from django.db import DatabaseError, connection, connections, transaction

import djqueue
from djqueue.models import Message, State
from tests.conftest import in_threads, needs_row_locks

pytestmark = pytest.mark.django_db(transaction=True)


def in_other_connection(fn, *, fail_on_lock_wait: bool = False):
    """Run ``fn`` in a thread of its own, hence on a second database connection.

    With ``fail_on_lock_wait`` that connection gives up on any row lock after
    one second with an error, so a claim that waited instead of skipping fails.
    """
    result: dict = {}

    def run() -> None:
        try:
            if fail_on_lock_wait:
                with connection.cursor() as cursor:
                    if connection.vendor == "mysql":
                        cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
                    else:
                        cursor.execute("SET lock_timeout = '1s'")
            result["value"] = fn()
        except BaseException as exc:
            result["error"] = exc
        finally:
            if fail_on_lock_wait:  # a pooled connection (PgBouncer, Django's pool) lives on
                with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                    cursor.execute("SET SESSION innodb_lock_wait_timeout = DEFAULT"
                                   if connection.vendor == "mysql" else "RESET lock_timeout")
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    if "error" in result:
        raise result["error"]
    return result["value"]


@needs_row_locks
def test_message_claimed_by_one_connection_is_skipped_by_the_other():
    djqueue.create_queue("jobs")
    first = djqueue.send("jobs", {"n": 1})
    second = djqueue.send("jobs", {"n": 2})
    with transaction.atomic():
        [mine] = djqueue.receive("jobs")  # row stays locked until this block commits
        assert mine.id == first.id
        [theirs] = in_other_connection(lambda: djqueue.receive("jobs"), fail_on_lock_wait=True)
        assert theirs.id == second.id
        assert in_other_connection(lambda: djqueue.receive("jobs"), fail_on_lock_wait=True) == []


def test_uncommitted_send_is_invisible_to_other_connections():
    djqueue.create_queue("jobs")
    with transaction.atomic():
        djqueue.send("jobs", {"n": 1})
        assert in_other_connection(
            lambda: list(djqueue.peek("jobs"))) == []
    assert len(in_other_connection(lambda: djqueue.receive("jobs"))) == 1


def test_concurrent_receivers_claim_disjoint_messages():
    djqueue.create_queue("jobs")
    djqueue.send_batch("jobs", [{"n": i} for i in range(600)])
    seen: list[list[int]] = [[] for _ in range(4)]

    def drain(slot: int) -> None:
        while batch := djqueue.receive("jobs", max_messages=7):
            seen[slot].extend(m.payload["n"] for m in batch)
            djqueue.ack_many(batch)

    in_threads(drain, 4)
    everything = [n for part in seen for n in part]
    assert sorted(everything) == list(range(600))
    assert not djqueue.peek("jobs", state=State.READY)


def test_session_lock_answers_probes_from_another_thread():
    """The worker takes its lock on the main thread and probes it from the heartbeat thread."""
    from djqueue.storage import session_locks

    if not session_locks.has_session_locks():
        pytest.skip("SQLite has no session locks")
    key = "c0ffee" * 5 + "aa"
    lock = session_locks.SessionLock(key)
    assert lock.acquire() is True
    try:
        assert in_threads(lambda _: lock.is_alive(), 1) == [True]
        assert session_locks.session_lock_free(key) is False
    finally:
        lock.close()
    assert session_locks.session_lock_free(key) is True


@needs_row_locks
def test_a_deadlock_victim_is_run_again():
    """Two transactions lock two rows in opposite orders: the database kills one, and
    retry_deadlocks runs it again, so both finish."""
    import threading
    from collections import Counter

    from django.db import transaction

    from djqueue.models import Message
    from djqueue.storage import dialects

    djqueue.create_queue("dl")
    a, b = djqueue.send("dl", {"n": 1}), djqueue.send("dl", {"n": 2})
    barrier = threading.Barrier(2)
    runs: Counter = Counter()

    def work(slot: int) -> bool:
        first, second = (a.pk, b.pk) if slot == 0 else (b.pk, a.pk)

        def txn() -> bool:
            runs[slot] += 1
            with transaction.atomic():
                Message.objects.select_for_update().filter(pk=first).get()
                if runs[slot] == 1:
                    barrier.wait(10)
                Message.objects.select_for_update().filter(pk=second).get()
            return True

        return dialects.retry_deadlocks(txn)

    assert in_threads(work, 2) == [True, True]
    # At least one victim, run again. Not exactly one: a victim's rerun, after its
    # 1-10 ms pause, may lock its first row again before the woken survivor takes it
    # (a loaded CI host, once on PostgreSQL), and the two deadlock once more.
    assert sum(runs.values()) >= 3, "a victim, run once more"
    assert max(runs.values()) <= dialects.DEADLOCK_RETRIES


@needs_row_locks
def test_a_conditioned_claim_never_makes_a_plain_claim_skip_a_row_it_turns_down():
    """A ``where`` receive and a plain one claim at the same moment (a ``--where``
    worker and a plain worker woken by one send), on a queue holding one message the
    condition turns down. The plain claim must get it every time: the conditioned claim
    may not hold, even for a moment, a row it does not take. (On MariaDB and MySQL a
    conditioned ``FOR UPDATE SKIP LOCKED`` locked every row it read, and the plain claim
    came back empty in about 6 % of rounds.)"""
    djqueue.create_queue("cond.race")
    empty_rounds = []
    for round_ in range(300):
        sent = djqueue.send("cond.race", {"round": round_}, priority=0)

        def claim(slot: int) -> list:
            if slot == 0:
                return djqueue.receive("cond.race", where="priority >= 9")
            return djqueue.receive("cond.race")

        conditioned, plain = in_threads(claim, 2, timeout=30)
        assert conditioned == []
        if [m.id for m in plain] != [sent.id]:
            empty_rounds.append(round_)
            Message.objects.filter(pk=sent.pk).delete()
        else:
            plain[0].ack()
    assert empty_rounds == [], f"the plain claim missed the message in {len(empty_rounds)} of 300 rounds"
