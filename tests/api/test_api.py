"""The Python API in one process: send, receive, ack, nack, extend, owner mode, operations."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

import djqueue
from djqueue.exceptions import NotOwner
from djqueue.models import History, Message, Outcome, State
from djqueue.storage.requeueing import promote_due

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queue():
    return djqueue.create_queue("jobs", backoff=[5, 10], max_attempts=3)


def test_send_receive_ack_moves_message_to_history(queue):
    sent = djqueue.send("jobs", {"n": 1}, headers={"kind": "demo"})
    [got] = djqueue.receive("jobs")
    assert (got.id, got.payload, got.headers, got.attempts) == (sent.id, {"n": 1}, {"kind": "demo"}, 1)
    assert got.state == State.CLAIMED and got.lease_token
    got.ack()
    assert not Message.objects.exists()
    record = History.objects.get(pk=sent.id)
    assert record.outcome == Outcome.ACKED and record.attempts == 1 and record.size == 7


def test_receive_orders_by_priority_then_send_order(queue):
    low = djqueue.send("jobs", {"n": "low"}, priority=-5)
    first = djqueue.send("jobs", {"n": "first"})
    second = djqueue.send("jobs", {"n": "second"})
    high = djqueue.send("jobs", {"n": "high"}, priority=10)
    got = djqueue.receive("jobs", max_messages=10)
    assert [m.id for m in got] == [high.id, first.id, second.id, low.id]


def test_earlier_queues_are_preferred(queue):
    djqueue.create_queue("urgent")
    later = djqueue.send("jobs", {"n": 1})
    urgent = djqueue.send("urgent", {"n": 2})
    got = djqueue.receive(["urgent", "jobs"], max_messages=1)
    assert [m.id for m in got] == [urgent.id]
    assert [m.id for m in djqueue.receive(["urgent", "jobs"])] == [later.id]


def test_send_batch_inserts_all(queue):
    sent = djqueue.send_batch("jobs", [{"n": i} for i in range(2500)])
    assert len(sent) == 2500
    assert Message.objects.filter(queue=queue, state=State.READY).count() == 2500
    got = djqueue.receive("jobs", max_messages=100)
    assert [m.payload["n"] for m in got] == list(range(100))
    assert len(djqueue.ack_many(got)) == 100


def test_delayed_message_is_scheduled_until_due(queue):
    msg = djqueue.send("jobs", {"n": 1}, delay=timedelta(hours=1))
    assert msg.state == State.SCHEDULED
    assert djqueue.receive("jobs") == []
    Message.objects.filter(pk=msg.pk).update(visible_at=timezone.now())
    assert promote_due() == 1
    assert [m.id for m in djqueue.receive("jobs")] == [msg.id]


def test_nack_without_error_returns_message_uncounted(queue):
    msg = djqueue.send("jobs", {"n": 1})
    [got] = djqueue.receive("jobs")
    got.nack()
    [again] = djqueue.receive("jobs")
    assert again.id == msg.id and again.attempts == 1
    with pytest.raises(NotOwner):
        got.ack()  # the first delivery's receipt is void
    again.ack()


def test_nack_with_error_follows_backoff_then_dead_letters(queue):
    dlq = djqueue.create_queue("jobs.dead")
    queue.dead_letter_queue = dlq
    queue.save()
    msg = djqueue.send("jobs", {"n": 1})
    for attempt, backoff in [(1, 5), (2, 10)]:
        [got] = djqueue.receive("jobs")
        before = timezone.now()
        got.nack(error=f"failure {attempt}")
        after = timezone.now()
        row = Message.objects.get(pk=msg.pk)
        assert row.state == State.SCHEDULED and row.attempts == attempt
        # The nack reads the clock once, between ``before`` and ``after``, and lengthens the
        # step by up to the queue's retry_jitter of it at random.
        wait = timedelta(seconds=backoff)
        assert before + wait <= row.visible_at <= after + wait * (1 + queue.retry_jitter)
        Message.objects.filter(pk=msg.pk).update(visible_at=timezone.now())
        promote_due()
    [got] = djqueue.receive("jobs")
    got.nack(error="failure 3")
    row = Message.objects.get(pk=msg.pk)
    assert (row.state, row.queue_id, row.origin_queue_id) == (State.DEAD, dlq.pk, queue.pk)
    assert [e["error"] for e in row.errors] == ["failure 1", "failure 2", "failure 3"]
    assert djqueue.redrive("jobs.dead") == 1
    [back] = djqueue.receive("jobs")
    assert back.id == msg.id and back.attempts == 1 and len(back.errors) == 3


def test_without_dead_letter_queue_dead_messages_stay_put(queue):
    msg = djqueue.send("jobs", {"n": 1})
    for _ in range(3):
        Message.objects.filter(pk=msg.pk).update(visible_at=timezone.now())
        promote_due()
        [got] = djqueue.receive("jobs")
        got.nack(error="no", delay=0)
    row = Message.objects.get(pk=msg.pk)
    assert (row.state, row.queue_id) == (State.DEAD, queue.pk)
    assert djqueue.redrive("jobs", to="jobs") == 1
    assert Message.objects.get(pk=msg.pk).state == State.READY


def test_extend_keeps_ownership_and_lost_lease_refuses_ack(queue):
    djqueue.send("jobs", {"n": 1})
    [got] = djqueue.receive("jobs", visibility_timeout=30)
    got.extend(120)
    assert Message.objects.get(pk=got.pk).visible_at > timezone.now() + timedelta(seconds=100)
    # Someone else's lease replaces ours (what the reaper does when a lease expires).
    Message.objects.filter(pk=got.pk).update(lease_token="someone-else")
    with pytest.raises(NotOwner):
        got.extend(10)
    with pytest.raises(NotOwner):
        got.ack()
    assert Message.objects.filter(pk=got.pk).exists()


def test_consume_acks_on_success_and_records_failure_on_exception(queue):
    djqueue.send("jobs", {"n": 1})
    with djqueue.consume("jobs") as msg:
        assert msg.payload == {"n": 1}
    assert History.objects.filter(pk=msg.pk).exists()
    djqueue.send("jobs", {"n": 2})
    with pytest.raises(RuntimeError), djqueue.consume("jobs") as msg:
        raise RuntimeError("handler broke")
    row = Message.objects.get(pk=msg.pk)
    assert row.state == State.SCHEDULED and "handler broke" in row.errors[0]["error"]
    with djqueue.consume("jobs") as nothing:
        assert nothing is None


def test_owner_session_acks_previous_on_next(queue):
    a, b = djqueue.send("jobs", {"n": "a"}), djqueue.send("jobs", {"n": "b"})
    with djqueue.OwnerSession("jobs") as session:
        assert session.next().id == a.id
        assert session.next().id == b.id
        assert History.objects.filter(pk=a.pk).exists()
        session.abort()
        assert Message.objects.get(pk=b.pk).state == State.READY
        assert session.next().id == b.id
    assert History.objects.filter(pk=b.pk).exists()


def test_paused_queue_is_not_claimed(queue):
    djqueue.send("jobs", {"n": 1})
    djqueue.pause("jobs")
    assert djqueue.receive("jobs") == []
    djqueue.resume("jobs")
    assert len(djqueue.receive("jobs")) == 1


def test_peek_get_delete_purge(queue):
    kept = djqueue.send("jobs", {"n": 0})
    djqueue.send_batch("jobs", [{"n": i} for i in range(1, 5)])
    djqueue.send("jobs", {"n": 9}, delay=60)
    assert [m.payload["n"] for m in djqueue.peek("jobs", state=State.READY)] == [0, 1, 2, 3, 4]
    assert djqueue.get_message(kept.id).payload == {"n": 0}
    assert djqueue.delete(kept.id) is True
    assert djqueue.finished(kept.id).outcome == Outcome.DELETED
    [claimed] = djqueue.receive("jobs")
    assert djqueue.purge("jobs") == 4  # ready and scheduled; the in-flight one stays
    assert list(Message.objects.values_list("pk", flat=True)) == [claimed.pk]
    claimed.ack()


def test_long_poll_returns_when_a_message_is_sent(queue):
    import threading

    def send_later():
        try:
            djqueue.send("jobs", {"n": 1})
        finally:  # this thread's own connection, else it outlives the test database
            connection.close()

    timer = threading.Timer(0.3, send_later)
    timer.start()
    got = djqueue.receive("jobs", wait=10)
    timer.join()
    assert [m.payload for m in got] == [{"n": 1}]


def test_transactional_send_rollback_leaves_nothing(queue):
    with pytest.raises(RuntimeError), transaction.atomic():
        djqueue.send("jobs", {"n": 1})
        djqueue.send_batch("jobs", [{"n": 2}, {"n": 3}])
        raise RuntimeError("rolled back")
    assert not Message.objects.exists()
    assert djqueue.receive("jobs") == []


def test_transactional_send_is_claimable_after_commit(queue):
    with transaction.atomic():
        sent = djqueue.send("jobs", {"n": 1})
    [got] = djqueue.receive("jobs")
    assert got.id == sent.id
