"""delete_batch: removing many messages at once as delete() removes one; history,
the trace and ordered groups see each, a few statements per chunk of messages."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import djqueue
from djqueue.api import queue_operations
from djqueue.exceptions import InvalidMessage
from djqueue.models import Event, History, Message, Outcome, State, TraceEvent
from tests.conftest import write_unreadable_time

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def chunks_of_three(settings):
    settings.DJQUEUE = {**getattr(settings, "DJQUEUE", {}), "PRUNE_BATCH": 3}


def test_every_chunk_goes_to_history_and_missing_ids_are_passed_over(chunks_of_three):
    djqueue.create_queue("del.jobs", trace=True)
    sent = djqueue.send_batch("del.jobs", [{"n": n, "pad": "é" * n} for n in range(8)])
    kept = djqueue.send("del.jobs", {"n": "kept"})
    ids = [m.id for m in sent]
    with CaptureQueriesContext(connection) as queries:
        assert djqueue.delete_batch([*ids, 10**12, ids[0]]) == 8  # unknown and repeated ids
    assert list(Message.objects.values_list("pk", flat=True)) == [kept.id]
    history = {h.pk: h for h in History.objects.all()}
    assert set(history) == set(ids)
    for message in sent:  # sizes in bytes, read in the database, as an ack's are
        assert history[message.id].outcome == Outcome.DELETED
        assert history[message.id].size == message.size
    assert set(TraceEvent.objects.filter(event=Event.DELETED)
               .values_list("message_id", flat=True)) == set(ids)
    # Three chunks of at most three; a handful of statements each, none per message.
    assert len(queries.captured_queries) <= 3 * 10, [q["sql"] for q in queries.captured_queries]


def test_only_unclaimed_leaves_held_messages_and_a_queue_keeps_to_its_own():
    djqueue.create_queue("del.jobs")
    djqueue.create_queue("del.other")
    held, free = djqueue.send("del.jobs", {"n": 1}), djqueue.send("del.jobs", {"n": 2})
    other = djqueue.send("del.other", {"n": 3})
    [got] = djqueue.receive("del.jobs", max_messages=1)
    assert got.id == held.id
    assert djqueue.delete_batch([held.id, free.id, other.id], only_unclaimed=True,
                                queue="del.jobs") == 1
    assert set(Message.objects.values_list("pk", flat=True)) == {held.id, other.id}
    assert Message.objects.get(pk=held.id).state == State.CLAIMED
    got.ack()
    assert History.objects.get(pk=held.id).outcome == Outcome.ACKED


def test_a_topic_delivery_is_recorded_with_its_shared_bodys_size():
    djqueue.create_topic("del.topic")
    djqueue.subscribe("del.topic", "a")
    djqueue.publish("del.topic", {"big": "x" * 1000})
    [delivery] = Message.objects.all()
    assert delivery.body == "" and delivery.size > 1000
    assert djqueue.delete_batch([delivery.pk]) == 1
    assert History.objects.get(pk=delivery.pk).size == delivery.size


def test_deleting_ordered_messages_hands_their_groups_on():
    djqueue.create_queue("del.ord", ordered=True)
    a1, a2, a3 = (djqueue.send("del.ord", {"n": i}, group_key="a") for i in range(3))
    b1, b2 = (djqueue.send("del.ord", {"n": i}, group_key="b") for i in range(2))
    assert djqueue.delete_batch([a1.id, a2.id, b1.id]) == 3
    states = dict(Message.objects.values_list("pk", "state"))
    assert states == {a3.id: State.READY, b2.id: State.READY}
    assert sorted(m.id for m in djqueue.receive("del.ord", max_messages=5)) == [a3.id, b2.id]


@pytest.mark.parametrize("ids", [None, "1,2", [1, "2"], [True], {1: 1}])
def test_ids_that_are_not_a_list_of_integers_are_refused(ids):
    djqueue.create_queue("del.jobs")
    kept = djqueue.send("del.jobs", {"n": 1})
    with pytest.raises(InvalidMessage, match="list of integers"):
        djqueue.delete_batch(ids)
    assert Message.objects.get().pk == kept.id


def test_messages_whose_times_cannot_be_read_are_deleted_and_hand_their_groups_on():
    """A hand edit can leave a time no driver reads back (PostgreSQL's 'infinity', text
    on SQLite that is no date). Deleting is how an operator removes such a row; it read
    the rows' times and failed on them (SQLite, PostgreSQL). It reads only what it
    needs now: the state, the group, the attempts and the owner. MySQL's strict mode
    refused to copy a zero date into history (error 1292): the copy writes the delete's
    time in its place on MySQL and MariaDB."""
    before = timezone.now().replace(microsecond=0)
    djqueue.create_queue("del.ord", ordered=True, trace=True)
    a1, a2 = (djqueue.send("del.ord", {"n": i}, group_key="a") for i in range(2))
    loose = [djqueue.send("del.ord", {"n": i}) for i in range(3)]
    for message in (a1, *loose):
        for column in ("sent_at", "visible_at"):
            write_unreadable_time("djqueue_message", column, message.id)
    assert djqueue.delete(a1.id) is True
    assert djqueue.delete_batch([m.id for m in loose]) == 3
    assert list(Message.objects.values_list("pk", "state")) == [(a2.id, State.READY)]
    assert set(History.objects.values_list("pk", "outcome")) == {
        (m.id, Outcome.DELETED) for m in (a1, *loose)}
    assert TraceEvent.objects.filter(event=Event.DELETED).count() == 4
    # History copied the times as stored, and finished() reads them as None; on MySQL
    # and MariaDB the zero date is copied as the delete's time.
    sent = [djqueue.finished(m.id).sent_at for m in (a1, *loose)]
    if connection.vendor == "mysql":
        assert all(at is not None and at >= before for at in sent)
    else:
        assert sent == [None] * 4
    assert djqueue.finished(a1.id, queue="del.ord").outcome == Outcome.DELETED
    [got] = djqueue.receive("del.ord")  # the group's next message holds it now
    assert got.id == a2.id


OPERATIONS_BY_ID = {
    "delete_batch": djqueue.delete_batch,
    "retry_now": queue_operations.retry_now,
    "change_visibility": lambda ids: queue_operations.change_visibility(ids, 60),
    "redrive": lambda ids: djqueue.redrive("del.jobs", ids=ids),
}


@pytest.mark.parametrize("ids", [[2**70], [1, -(2**5000)], [0], [-5], [2**63]])
def test_ids_outside_a_keys_range_are_refused_by_every_operation_that_takes_ids(ids):
    """Before, 2**70 was SQLite's OverflowError: a driver's error, not djqueue's."""
    djqueue.create_queue("del.jobs")
    kept = djqueue.send("del.jobs", {"n": 1})
    for name, operation in OPERATIONS_BY_ID.items():
        with pytest.raises(InvalidMessage, match=r"from 1 to 2\*\*63-1"):
            operation(ids)
        assert Message.objects.get().pk == kept.id, name


def test_more_ids_than_one_statement_takes_are_worked_in_chunks():
    """70,000 ids, past the 65,535 parameters PostgreSQL's protocol carries a statement
    (server-side binding sends one an id): each operation works them in chunks."""
    djqueue.create_queue("del.jobs")
    scheduled = djqueue.send("del.jobs", {"n": 1}, delay=3600)
    dead, gone = djqueue.send("del.jobs", {"n": 2}), djqueue.send("del.jobs", {"n": 3})
    Message.objects.filter(pk=dead.id).update(state=State.DEAD)
    absent = list(range(10**12, 10**12 + 70_000))
    assert queue_operations.retry_now([*absent, scheduled.id]) == 1
    assert Message.objects.get(pk=scheduled.id).state == State.READY
    assert djqueue.redrive("del.jobs", ids=[dead.id, *absent]) == 1
    assert Message.objects.get(pk=dead.id).state == State.READY
    assert queue_operations.change_visibility([*absent, scheduled.id, dead.id], 60) == 2
    assert djqueue.delete_batch([gone.id, *absent]) == 1
    assert set(Message.objects.values_list("pk", flat=True)) == {scheduled.id, dead.id}
