"""Deduplication, quotas and flow control, message trace."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

import djqueue
from djqueue.exceptions import InvalidMessage, QueueFull
from djqueue.maintenance.pruning import prune_history
from djqueue.models import DedupKey, History, Message, State
from tests.conftest import in_threads, wait_until, write_unreadable_time

pytestmark = pytest.mark.django_db(transaction=True)


def test_eight_concurrent_senders_of_one_dedup_key_make_one_message():
    djqueue.create_queue("dd")
    for round_no in range(5):
        key = f"order-{round_no}"
        results = in_threads(lambda i, key=key: djqueue.send("dd", {"sender": i}, dedup_key=key), 8)
        assert len({m.pk for m in results}) == 1
        assert sum(m.duplicate for m in results) == 7
        assert Message.objects.filter(queue__name="dd").count() == round_no + 1


def test_a_dedup_key_is_free_again_once_its_message_is_no_longer_pending():
    djqueue.create_queue("dd")
    first = djqueue.send("dd", {"n": 1}, dedup_key="k")
    assert first.duplicate is False
    again = djqueue.send("dd", {"n": 2}, dedup_key="k")
    assert again.pk == first.pk and again.duplicate is True
    assert Message.objects.get(pk=first.pk).duplicate is False, "the mark is not stored"
    [got] = djqueue.receive("dd")
    assert djqueue.send("dd", {"n": 3}, dedup_key="k").pk == first.pk, "claimed is pending"
    got.ack()
    second = djqueue.send("dd", {"n": 4}, dedup_key="k")
    assert second.pk != first.pk and second.duplicate is False
    assert Message.objects.get(pk=second.pk).payload == {"n": 4}


def test_a_dedup_window_outlives_the_message_and_then_expires():
    djqueue.create_queue("ddw", dedup_window=0.5)
    first = djqueue.send("ddw", {"n": 1}, dedup_key="k")
    [got] = djqueue.receive("ddw")
    got.ack()
    again = djqueue.send("ddw", {"n": 2}, dedup_key="k")
    assert isinstance(again, History) and again.pk == first.pk and again.duplicate
    expires = DedupKey.objects.get(key="k").expires_at
    wait_until(lambda: timezone.now() > expires, 5, "the window to pass")
    fresh = djqueue.send("ddw", {"n": 3}, dedup_key="k")
    assert fresh.pk != first.pk and isinstance(fresh, Message)


def test_pruning_drops_only_keys_that_no_longer_hold():
    djqueue.create_queue("dd")
    djqueue.create_queue("ddw", dedup_window=3600)
    held = djqueue.send("dd", {"n": 1}, dedup_key="held")
    done = djqueue.send("dd", {"n": 2}, dedup_key="done")
    djqueue.delete(done)
    djqueue.send("ddw", {"n": 3}, dedup_key="window")
    prune_history()
    assert set(DedupKey.objects.values_list("key", flat=True)) == {"held", "window"}
    assert djqueue.send("dd", {"n": 4}, dedup_key="held").pk == held.pk


def test_a_dedup_key_or_an_original_whose_time_cannot_be_read_stops_no_send():
    """A dedup key whose window's end, or an original message whose send time, a hand
    edit left unreadable failed every send of that key with the driver's error. An
    unreadable window's end counts as passed: the send takes the key over and writes
    a time that reads. (On MariaDB the driver reads a zero date as nothing, which for a
    key is no window: it holds while its message is pending.) An original that cannot
    be read whole is the duplicate's answer all the same, that time None."""
    djqueue.create_queue("ddw", dedup_window=3600)
    first = djqueue.send("ddw", {"n": 1}, dedup_key="k")
    write_unreadable_time("djqueue_dedupkey", "expires_at", DedupKey.objects.get(key="k").pk)
    second = djqueue.send("ddw", {"n": 2}, dedup_key="k")
    if connection.vendor == "mysql":
        assert second.pk == first.pk and second.duplicate
        return
    assert second.pk != first.pk and not second.duplicate
    assert DedupKey.objects.get(key="k").expires_at > timezone.now()  # mended
    write_unreadable_time("djqueue_message", "sent_at", second.pk)
    again = djqueue.send("ddw", {"n": 3}, dedup_key="k")
    assert (again.pk, again.duplicate, again.sent_at) == (second.pk, True, None)


@pytest.mark.parametrize("bad", ["", 5, "x" * 201])
def test_bad_dedup_keys_are_refused(bad):
    djqueue.create_queue("dd")
    with pytest.raises(InvalidMessage, match="dedup_key"):
        djqueue.send("dd", {}, dedup_key=bad)
    assert not Message.objects.exists()


def test_max_depth_holds_under_eight_concurrent_senders():
    djqueue.create_queue("full", max_depth=100)

    def sender(i: int) -> tuple[int, int]:
        ok = refused = 0
        for n in range(40):
            try:
                if n % 4 == 0:
                    djqueue.send_batch("full", [{"s": i, "n": n}, {"s": i, "n": n + 1000}])
                    ok += 2
                else:
                    djqueue.send("full", {"s": i, "n": n})
                    ok += 1
            except QueueFull:
                refused += 1
        return ok, refused

    results = in_threads(sender, 8)
    assert sum(ok for ok, _ in results) == 100
    assert sum(refused for _, refused in results) > 0
    assert Message.objects.filter(queue__name="full").count() == 100


def test_blocking_senders_wait_for_room_and_depth_never_exceeds_the_limit():
    djqueue.create_queue("full", max_depth=20)
    stop = threading.Event()  # the consumer is done, or in_threads gives up
    peak = [0]

    def role(i: int) -> int:
        if i == 8:  # consumer
            done = 0
            while done < 8 * 30 and not stop.is_set():
                got = djqueue.receive("full", max_messages=5, wait=1)
                done += len(djqueue.ack_many(got))
            stop.set()
            return done
        if i == 9:  # observer; its pause leaves the GIL to the writers (on SQLite a writer
            # starved of it holds the database lock long enough to time the others out)
            while not stop.wait(0.002):
                peak[0] = max(peak[0], Message.objects.filter(queue__name="full").count())
            return 0
        for n in range(30):
            djqueue.send("full", {"s": i, "n": n}, block=True, timeout=60)
        return 30

    results = in_threads(role, 10, timeout=300, stop=stop)
    assert results[8] == 240 and History.objects.count() == 240
    assert 0 < peak[0] <= 20


def test_block_gives_up_after_its_timeout():
    djqueue.create_queue("full", max_depth=1)
    djqueue.send("full", {})
    started = time.monotonic()
    with pytest.raises(QueueFull):
        djqueue.send("full", {}, block=True, timeout=0.3)
    assert time.monotonic() - started >= 0.3
    assert Message.objects.count() == 1


def test_paused_queues_are_not_claimed_but_accept_sends():
    djqueue.create_queue("p")
    djqueue.pause("p")
    djqueue.send("p", {"n": 1})
    assert djqueue.receive("p") == []
    djqueue.resume("p")
    assert len(djqueue.receive("p")) == 1


def test_trace_of_a_message_retried_twice_dead_lettered_and_redriven():
    dlq = djqueue.create_queue("tr.dlq", trace=True)
    djqueue.create_queue("tr", trace=True, max_attempts=3, backoff=[0], dead_letter_queue=dlq)
    sent = djqueue.send("tr", {"n": 1})
    for attempt in range(3):
        [m] = djqueue.receive("tr", owner=f"w{attempt}")
        m.nack(error=f"failure {attempt + 1}")
    assert Message.objects.get(pk=sent.pk).state == State.DEAD
    assert djqueue.redrive("tr.dlq") == 1
    [m] = djqueue.receive("tr", owner="w9")
    m.ack()
    steps = [(e.event, e.attempt) for e in djqueue.message_trace(sent.pk)]
    assert steps == [
        ("sent", 0),
        ("claimed", 1), ("nacked", 1), ("retried", 1),
        ("claimed", 2), ("nacked", 2), ("retried", 2),
        ("claimed", 3), ("nacked", 3), ("dead_lettered", 3),
        ("redriven", 0),
        ("claimed", 1), ("acked", 1),
    ]
    events = djqueue.message_trace(sent.pk)
    assert [e.worker for e in events if e.event == "claimed"] == ["w0", "w1", "w2", "w9"]
    assert [e.detail for e in events if e.event == "nacked"] == [
        "failure 1", "failure 2", "failure 3"]
    assert events[9].queue_id == dlq.pk and "from queue tr.dlq" in events[10].detail
    times = [e.at for e in events]
    assert times == sorted(times)


def test_a_traced_batch_and_a_traced_topic_delivery_record_each_message_sent():
    """Each message of a batch, and each delivery of a published batch, has its own
    SENT event: the batch's messages carry their ids on every database (MySQL, which
    has no RETURNING, included)."""
    djqueue.create_queue("tr.batch", trace=True)
    batch = djqueue.send_batch("tr.batch", [{"n": n} for n in range(5)])
    djqueue.create_topic("tr.topic")
    djqueue.subscribe("tr.topic", "audit", trace=True)
    djqueue.publish_batch("tr.topic", [{"n": n} for n in range(3)])
    delivered = djqueue.receive("tr.topic:audit", max_messages=10)
    assert len(delivered) == 3
    for message in [*batch, *delivered]:
        assert message.pk is not None
        assert [e.event for e in djqueue.message_trace(message.pk)][:1] == ["sent"]


def test_trace_is_off_by_default_and_pruned_with_retention():
    djqueue.create_queue("quiet")
    djqueue.create_queue("loud", trace=True, retention=60)
    djqueue.send("quiet", {})
    loud = djqueue.send("loud", {})
    assert [e.event for e in djqueue.message_trace(loud.pk)] == ["sent"]
    prune_history(timezone.now() + timedelta(seconds=61))
    assert djqueue.message_trace(loud.pk) == []
