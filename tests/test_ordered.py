"""Ordered groups: strict per-key order, one holder per group, parallel groups."""

import random
import threading

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import djqueue
from djqueue.lifecycle import ack_many
from djqueue.models import Message, MessageGroup, State
from tests.conftest import in_threads

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
    from djqueue.lifecycle import return_claims

    assert return_claims(Message.objects.filter(pk=a1.id, state=State.CLAIMED), "expired", 10) == 1
    [again] = djqueue.receive("ord")
    again.ack()
    assert MessageGroup.objects.get(key="a").last_acked_id == a1.id
    assert djqueue.is_stale(first), "the first delivery is now stale"
    [second] = djqueue.receive("ord")
    assert second.id == a2.id and not djqueue.is_stale(second)


@pytest.mark.slow
@pytest.mark.parametrize("sizes", [(50, 200)])
def test_property_per_group_order_under_random_interleavings(ordered, sizes):
    """8 workers over 50 groups x 200 messages, sends interleaved at random and concurrent
    with the consumers: each group is processed in send order, never by two workers at once."""
    groups, per_group = sizes
    examples = 2 if connection.vendor != "sqlite" else 1

    @settings(max_examples=examples, deadline=None, database=None,
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

        def worker(slot: int) -> None:
            if slot == 8:
                for start in range(0, total, chunk):
                    part = ordered_sends[start:start + chunk]
                    djqueue.send_batch("ord", [{"g": g, "i": i} for g, i in part],
                                       group_keys=[f"g{g}" for g, _ in part])
                sent_all.set()
                return
            local = random.Random(seed + slot)
            while True:
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
                        holders[g] = slot
                for m in got:
                    if local.random() < 0.3:
                        threading.Event().wait(local.random() / 1000)
                    processed[m.payload["g"]].append(m.payload["i"])
                with guard:
                    for m in got:
                        del holders[m.payload["g"]]
                assert len(ack_many(got)) == len(got)

        in_threads(worker, 9, timeout=600)
        assert not violations, violations[:5]
        for g, seen in processed.items():
            assert seen == list(range(per_group)), f"group {g} out of order"
        assert not Message.objects.exists()

    run()


def test_the_worker_skips_a_stale_delivery_without_running_its_handler():
    from djqueue.worker import Worker, WorkerOptions
    from tests.models import Effect

    djqueue.create_queue("t.record", ordered=True, skip_stale=True)
    first = djqueue.send("t.record", {"n": 1}, group_key="k")
    worker = Worker(WorkerOptions(queues=["t.record"]))
    [stale] = djqueue.receive("t.record")
    from djqueue.lifecycle import return_claims

    return_claims(Message.objects.filter(pk=first.pk), "expired", 10)
    [fresh] = djqueue.receive("t.record")
    fresh.ack()
    done = worker._execute(stale)
    assert done.lost and done.error is None
    assert not Effect.objects.exists(), "the handler did not run"
