"""Ordered groups: strict per-key order, one holder per group, parallel groups."""

import os
import random
import threading

import pytest
from django.db import connection, transaction
from django.db.models import Count
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import djqueue
from djqueue.models import GROUP_HOLDING_STATES, Message, MessageGroup, State
from djqueue.storage.transitions import ack_many
from tests.conftest import in_threads, needs_row_locks, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ordered():
    return djqueue.create_queue("ord", ordered=True, backoff=[0], max_attempts=2,
                                dead_letter_queue=djqueue.create_queue("ord.dlq"))


def test_next_message_of_a_group_waits_until_the_previous_is_acked(ordered):
    a1, a2, a3 = (djqueue.send("ord", {"n": i}, group_key="a") for i in range(3))
    b1 = djqueue.send("ord", {"n": 9}, group_key="b")
    free = djqueue.send("ord", {"n": 10})
    assert [a1.state, a2.state, a3.state] == [State.READY, State.WAITING, State.WAITING]
    got = djqueue.receive("ord", max_messages=10)
    assert {m.id for m in got} == {a1.id, b1.id, free.id}, "one per group, plus unkeyed"
    assert djqueue.receive("ord", max_messages=10) == []
    next(m for m in got if m.id == a1.id).ack()
    [second] = djqueue.receive("ord", max_messages=10)
    assert second.id == a2.id


def test_a_retry_keeps_the_group_and_a_dead_letter_hands_it_on(ordered):
    a1, a2 = (djqueue.send("ord", {"n": i}, group_key="a") for i in range(2))
    [m] = djqueue.receive("ord")
    m.nack(error="boom")  # retried at once (backoff 0), still holds the group
    [again] = djqueue.receive("ord", max_messages=5)
    assert again.id == a1.id and again.attempts == 2
    again.nack(error="boom again")  # max_attempts=2: dead-lettered
    assert Message.objects.get(pk=a1.id).state == State.DEAD
    [nxt] = djqueue.receive("ord", max_messages=5)
    assert nxt.id == a2.id


def test_a_redriven_message_rejoins_its_group_behind_the_holder(ordered):
    a1, a2, a3 = (djqueue.send("ord", {"n": i}, group_key="a") for i in range(3))
    for _ in range(2):
        [m] = djqueue.receive("ord")
        m.nack(error="x")
    [holder] = djqueue.receive("ord")
    assert holder.id == a2.id
    assert djqueue.redrive("ord.dlq") == 1
    assert Message.objects.get(pk=a1.id).state == State.WAITING
    holder.ack()
    [nxt] = djqueue.receive("ord", max_messages=5)
    assert nxt.id == a1.id, "the redriven message goes next (lowest id waiting)"
    nxt.ack()
    assert [m.id for m in djqueue.receive("ord", max_messages=5)] == [a3.id]


def test_delete_and_purge_hand_the_group_on(ordered):
    a1, a2, _ = (djqueue.send("ord", {"n": i}, group_key="a") for i in range(3))
    assert djqueue.delete(a1)
    assert Message.objects.get(pk=a2.id).state == State.READY
    [m] = djqueue.receive("ord")
    djqueue.send("ord", {"n": 4}, group_key="a")
    assert djqueue.purge("ord") == 2  # a3 and the new one; a2 is in flight
    m.ack()
    assert not Message.objects.filter(queue=ordered).exists()
    late = djqueue.send("ord", {"n": 5}, group_key="a")
    assert late.state == State.READY


def test_stale_guard_flags_a_redelivery_older_than_the_last_ack(ordered):
    a1, a2 = (djqueue.send("ord", {"n": i}, group_key="a") for i in range(2))
    [first] = djqueue.receive("ord", visibility_timeout=0.01)
    assert not djqueue.is_stale(first)
    from djqueue.storage.requeueing import return_claims

    assert return_claims(Message.objects.filter(pk=a1.id, state=State.CLAIMED), "expired", 10) == 1
    [again] = djqueue.receive("ord")
    again.ack()
    assert MessageGroup.objects.get(key="a").last_acked_id == a1.id
    assert djqueue.is_stale(first), "the first delivery is now stale"
    [second] = djqueue.receive("ord")
    assert second.id == a2.id and not djqueue.is_stale(second)


def lock_waits() -> int:
    """How many transactions wait for a lock right now: on MySQL/MariaDB, those on this
    test database; on PostgreSQL, those waiting for this connection's transaction.

    Why not PostgreSQL's pg_stat_activity (which names each backend's database): a
    transaction reads it as a snapshot taken at its first read, so a waiter whose
    connection opened after that was never seen (the deadlock test below then waited
    its 30 s for a sender that was waiting all along). pg_locks and pg_blocking_pids
    are read live."""
    sql = ("SELECT COUNT(*) FROM information_schema.innodb_trx t "
           "JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "
           "WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()"
           if connection.vendor == "mysql" else
           "SELECT COUNT(*) FROM pg_locks l "
           "WHERE NOT l.granted AND pg_backend_pid() = ANY(pg_blocking_pids(l.pid))")
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


@needs_row_locks
def test_a_send_chosen_as_deadlock_victim_is_run_again(ordered):
    """A transaction locks group b then a; a send_batch to groups a and b locks a, then
    waits for b: a deadlock. The sender is the victim (it holds less and waited first);
    it runs again after the other commits, and decides hold-or-wait afresh."""
    from djqueue.storage.ordered_groups import lock_groups
    from tests.models import Effect

    b_locked = threading.Event()
    other_runs = []

    def role(slot: int) -> list | None:
        if slot == 0:  # the other transaction; not retried, so it must not be the victim
            other_runs.append(1)
            with transaction.atomic():
                Effect.objects.bulk_create([Effect(key=n) for n in range(200)])  # weight
                lock_groups("default", [(ordered.pk, "b")])
                b_locked.set()
                # InnoDB refreshes its lock view only when it was not read for 0.1 s
                wait_until(lambda: lock_waits() >= 1, 30, "the sender to wait for group b",
                           interval=0.2)
                lock_groups("default", [(ordered.pk, "a")])
                djqueue.send("ord", {"n": "other"}, group_key="a")
            return None
        assert b_locked.wait(30)
        return djqueue.send_batch("ord", [{"n": 1}, {"n": 2}], group_keys=["a", "b"])

    _, sent = in_threads(role, 2, timeout=60)
    assert other_runs == [1], "the other transaction committed at its first try"
    assert [m.state for m in sent] == [State.WAITING, State.READY], "a is held by the other"
    assert {m.id: m.state for m in sent} == dict(
        Message.objects.filter(pk__in=[m.id for m in sent]).values_list("id", "state"))


def describe_groups() -> dict:
    """What is left of the queue, per state, and the groups that wait with no holder."""
    by_state = {State(s).label: n for s, n in Message.objects.values_list("state").annotate(
        n=Count("id")).order_by()}
    waiting = set(Message.objects.filter(state=State.WAITING)
                  .values_list("group_key", flat=True).distinct())
    held = set(Message.objects.filter(state__in=GROUP_HOLDING_STATES)
               .values_list("group_key", flat=True).distinct())
    return {"by_state": by_state, "waiting_without_holder": sorted(waiting - held)}


#: Random interleavings tried per run: `make test` one (each takes 30-40 s with a
#: MariaDB or a PostgreSQL beside it; a new one every run), `make soak` four.
ORDER_EXAMPLES = int(os.environ.get("DJQUEUE_ORDER_EXAMPLES", "1"))


@pytest.mark.slow
@pytest.mark.parametrize("sizes", [(50, 200)])
def test_property_per_group_order_under_random_interleavings(ordered, sizes):
    """8 workers over 50 groups x 200 messages, sends interleaved at random and concurrent
    with the consumers: each group is processed in send order, never by two workers at once."""
    groups, per_group = sizes

    # No shrinking: each example takes most of a minute, and a failure is reported as is.
    @settings(max_examples=ORDER_EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2**32 - 1),
           batch_sizes=st.lists(st.integers(1, 40), min_size=8, max_size=8),
           chunk=st.integers(50, 500))
    def run(seed, batch_sizes, chunk):
        Message.objects.all().delete()
        MessageGroup.objects.all().delete()
        rng = random.Random(seed)
        sends = [(g, i) for g in range(groups) for i in range(per_group)]
        # a random interleaving that keeps each group's own order
        rng.shuffle(sends)
        counters = [0] * groups
        ordered_sends = []
        for g, _ in sends:
            ordered_sends.append((g, counters[g]))
            counters[g] += 1
        total = len(ordered_sends)
        processed: dict[int, list[int]] = {g: [] for g in range(groups)}
        holders: dict[int, int] = {}
        violations: list[str] = []
        guard = threading.Lock()
        sent_all = threading.Event()
        stop = threading.Event()  # set by in_threads when a thread fails or time is up

        def worker(slot: int) -> None:
            if slot == 8:
                for start in range(0, total, chunk):
                    if stop.is_set():
                        return
                    part = ordered_sends[start:start + chunk]
                    djqueue.send_batch("ord", [{"g": g, "i": i} for g, i in part],
                                       group_keys=[f"g{g}" for g, _ in part])
                sent_all.set()
                return
            local = random.Random(seed + slot)
            while not stop.is_set():
                got = djqueue.receive("ord", max_messages=batch_sizes[slot], wait=0.2)
                if not got:
                    with guard:
                        if sent_all.is_set() and sum(map(len, processed.values())) == total:
                            return
                    continue
                with guard:
                    for m in got:
                        g = m.payload["g"]
                        if g in holders:
                            violations.append(f"group {g} held by {holders[g]} and {slot}")
                        holders.setdefault(g, []).append(slot)
                for m in got:
                    if local.random() < 0.3:
                        threading.Event().wait(local.random() / 1000)
                    processed[m.payload["g"]].append(m.payload["i"])
                with guard:
                    for m in got:
                        holders[m.payload["g"]].remove(slot)
                        if not holders[m.payload["g"]]:
                            del holders[m.payload["g"]]
                assert len(ack_many(got)) == len(got)

        try:
            in_threads(worker, 9, timeout=400, stop=stop)
        except BaseException:
            print("processed per group:", {g: len(s) for g, s in processed.items()})
            print("left in the queue:", describe_groups())
            raise
        assert not violations, violations[:5]
        for g, seen in processed.items():
            assert seen == list(range(per_group)), f"group {g} out of order"
        assert not Message.objects.exists()

    run()


def test_the_worker_skips_a_stale_delivery_without_running_its_handler():
    from djqueue.worker.message_worker import Worker
    from djqueue.worker.options import WorkerOptions
    from tests.models import Effect

    djqueue.create_queue("t.record", ordered=True, skip_stale=True)
    first = djqueue.send("t.record", {"n": 1}, group_key="k")
    worker = Worker(WorkerOptions(queues=["t.record"]))
    [stale] = djqueue.receive("t.record")
    from djqueue.storage.requeueing import return_claims

    return_claims(Message.objects.filter(pk=first.pk), "expired", 10)
    [fresh] = djqueue.receive("t.record")
    fresh.ack()
    done = worker._calls.execute(stale)
    assert done.lost and done.error is None
    assert not Effect.objects.exists(), "the handler did not run"
