"""Messages that expire (djqueue.storage.expiry): one not delivered by its expiry is
dead-lettered unrun, saying when it expired, and runs once redriven; through
receive(), a real worker process, djqueue.drain() and django.tasks. Bad expiries are
refused at the send with nothing stored.

The tests wait for the clock to pass an expiry (wait_until on time.time()), never
for a worker to happen to be late."""

from __future__ import annotations

import dataclasses
import signal
import time
from datetime import timedelta

import pytest
from django.utils import timezone

import djqueue
from djqueue.exceptions import InvalidMessage, TaskDeadLettered
from djqueue.models import Event, Message, State, TraceEvent
from djqueue.storage.expiry import EXPIRES_HEADER, expires_at
from djqueue.tasks.compat import InvalidTask, TaskResultStatus
from tests import tasks
from tests.conftest import wait_until
from tests.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def past(*messages: Message) -> None:
    """Wait until the clock has passed the messages' expiries."""
    last = max(expires_at(m) for m in messages)
    wait_until(lambda: time.time() > last, 30, "the expiry to pass", interval=0.01)


def test_a_message_not_delivered_by_its_expiry_is_dead_lettered_unrun():
    djqueue.create_queue("t.expiring", trace=True)
    expiring = djqueue.send("t.expiring", {"n": 1}, expires=0.2, headers={"tenant": "a"})
    lasting = djqueue.send("t.expiring", {"n": 2}, expires=timedelta(hours=1))
    plain = djqueue.send("t.expiring", {"n": 3})
    assert expiring.headers["tenant"] == "a"
    assert expires_at(expiring) == pytest.approx(
        (expiring.sent_at + timedelta(seconds=0.2)).timestamp(), abs=1e-5)
    past(expiring)
    got = djqueue.receive("t.expiring", max_messages=10)
    assert sorted(m.pk for m in got) == [lasting.pk, plain.pk]
    dead = Message.objects.get(pk=expiring.pk)
    assert (dead.state, dead.attempts) == (State.DEAD, 0)  # never delivered
    assert dead.errors[-1]["attempt"] == 0
    assert dead.errors[-1]["error"].startswith("Expired at ")
    assert "before a delivery: not run." in dead.errors[-1]["error"]
    assert dead.headers == {"tenant": "a"}  # the expiry went with the dead-lettering
    assert TraceEvent.objects.filter(message_id=expiring.pk,
                                     event=Event.DEAD_LETTERED).exists()
    for message in got:
        message.ack()
    assert djqueue.redrive("t.expiring", ids=[expiring.pk]) == 1
    [again] = djqueue.receive("t.expiring")  # no expiry now: it runs
    assert again.pk == expiring.pk and again.payload == {"n": 1}


def test_a_receive_of_one_behind_expired_messages_gets_the_live_one():
    djqueue.create_queue("t.expiring")
    expired = djqueue.send_batch("t.expiring", [{"n": i} for i in range(3)], expires=0.2)
    live = djqueue.send("t.expiring", {"n": 3})
    past(*expired)
    [got] = djqueue.receive("t.expiring")  # three claims set one aside each, a fourth gets it
    assert got.pk == live.pk
    assert Message.objects.filter(state=State.DEAD).count() == 3


def test_a_receive_behind_a_long_run_of_expired_messages_sweeps_them_and_gets_the_live_one():
    # More than a claim a round could set aside (EXPIRED_ROUNDS + 1 claims of one), on a
    # queue without a message_ttl, which the reaper does not sweep: the receive sweeps
    # the head once its claim found nothing but expired messages.
    djqueue.create_queue("t.expiring")
    expired = djqueue.send_batch("t.expiring", [{"n": i} for i in range(1200)], expires=0.3)
    live = djqueue.send("t.expiring", {"n": "live"})
    past(*expired)
    [got] = djqueue.receive("t.expiring")
    assert got.pk == live.pk
    dead = Message.objects.filter(state=State.DEAD)
    assert dead.count() == 1200
    assert set(dead.values_list("attempts", flat=True)) == {0}
    assert all(m.errors[-1]["error"].startswith("Expired at ") for m in dead[:50])


def test_a_worker_never_runs_an_expired_message(spawn):
    djqueue.create_queue("t.record")
    expiring = djqueue.send_batch("t.record", [{"n": i} for i in range(5)], expires=0.2)
    djqueue.send_batch("t.record", [{"n": i} for i in range(5, 10)])
    past(*expiring)
    worker = spawn("djqueue_worker", "t.record", "-c", "2")
    wait_until(lambda: Effect.objects.count() == 5
               and Message.objects.filter(state=State.DEAD).count() == 5, 60,
               f"the worker to run 5 and set 5 aside\n{worker.output()}")
    assert sorted(Effect.objects.values_list("key", flat=True)) == list(range(5, 10))
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


def test_drain_sets_expired_messages_aside_and_a_delayed_ones_expiry_counts_from_its_delay():
    djqueue.create_queue("t.record")
    delayed = djqueue.send("t.record", {"n": 1}, delay=3600, expires=60)
    assert expires_at(delayed) == pytest.approx(
        (delayed.visible_at + timedelta(seconds=60)).timestamp(), abs=1e-5)
    expiring = djqueue.send("t.record", {"n": 2}, expires=0.2)
    past(expiring)
    drained = djqueue.drain("t.record")
    assert (drained.runs, drained.acked) == (0, 0)
    assert Message.objects.get(pk=expiring.pk).state == State.DEAD
    assert djqueue.drain("t.record", delayed=True).acked == 1  # made due at once: in time
    assert list(Effect.objects.values_list("key", flat=True)) == [1]


@pytest.mark.parametrize("options", [
    {"expires": 0}, {"expires": -1}, {"expires": float("nan")}, {"expires": float("inf")},
    {"expires": "soon"}, {"expires": True}, {"expires": 10**12},
    {"expires": timezone.now().replace(tzinfo=None)},
    {"expires": timezone.now() - timedelta(seconds=1)},
    {"expires": timezone.now() + timedelta(seconds=60), "delay": 120},
    {"headers": {EXPIRES_HEADER: "tomorrow"}},
    {"headers": {EXPIRES_HEADER: 1.0}},
    {"headers": {EXPIRES_HEADER: time.time() + 60}, "expires": 60},
])
def test_bad_expiries_are_refused_with_nothing_stored(options):
    djqueue.create_queue("t.expiring")
    with pytest.raises(InvalidMessage, match=r"(?i)expir"):
        djqueue.send("t.expiring", {"n": 1}, **options)
    with pytest.raises(InvalidMessage, match=r"(?i)expir"):
        djqueue.send_batch("t.expiring", [{"n": 1}, {"n": 2}], **options)
    assert not Message.objects.exists()


def test_a_queues_message_ttl_stamps_each_send_and_delivery_that_names_none():
    djqueue.create_queue("t.ttl", message_ttl=0.2)
    stamped = djqueue.send("t.ttl", {"n": 1})
    own = djqueue.send("t.ttl", {"n": 2}, expires=3600)  # a send's own expiry wins
    delayed = djqueue.send("t.ttl", {"n": 3}, delay=3600)
    assert expires_at(stamped) == pytest.approx(
        (stamped.visible_at + timedelta(seconds=0.2)).timestamp(), abs=1e-5)
    assert expires_at(delayed) == pytest.approx(
        (delayed.visible_at + timedelta(seconds=0.2)).timestamp(), abs=1e-5)
    djqueue.create_topic("t.ttl-topic")
    djqueue.subscribe("t.ttl-topic", "a", message_ttl=0.2)
    djqueue.publish("t.ttl-topic", {"n": 4})
    delivery = Message.objects.get(stored_body__isnull=False)
    assert expires_at(delivery) is not None
    past(stamped, delivery)
    [got] = djqueue.receive("t.ttl", max_messages=10)
    assert got.pk == own.pk
    assert djqueue.receive(djqueue.group_queues("t.ttl-topic", "a")) == []
    assert set(Message.objects.filter(state=State.DEAD).values_list("pk", flat=True)) == {
        stamped.pk, delivery.pk}


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), "soon", 10**12])
def test_a_bad_message_ttl_is_refused(ttl):
    from djqueue.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="message_ttl"):
        djqueue.create_queue("t.ttl", message_ttl=ttl)


def test_a_client_may_give_the_expiry_as_a_header():
    djqueue.create_queue("t.expiring")
    stamp = time.time() + 0.2
    message = djqueue.send("t.expiring", {"n": 1}, headers={EXPIRES_HEADER: stamp})
    assert expires_at(message) == stamp
    past(message)
    assert djqueue.receive("t.expiring") == []
    assert Message.objects.get().state == State.DEAD


def test_a_task_not_started_by_its_expiry_never_starts_and_reads_failed():
    result = tasks.expiring_add.enqueue(1, 2)
    past(Message.objects.get(pk=int(result.id)))
    assert djqueue.drain("t.tasks").runs == 0
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is TaskDeadLettered and "Expired at" in error.traceback
    assert "dead-lettered after 0 deliveries" in error.traceback
    with pytest.raises(InvalidTask, match="A task's expires must be a number of seconds above 0"):
        dataclasses.replace(tasks.expiring_add, expires=-1)


def test_each_groups_delivery_of_a_publication_expires_with_it():
    djqueue.create_topic("t.prices")
    djqueue.subscribe("t.prices", "a")
    djqueue.subscribe("t.prices", "b")
    djqueue.publish("t.prices", {"price": 1}, expires=0.2)
    djqueue.publish("t.prices", {"price": 2})
    deliveries = list(Message.objects.filter(headers__isnull=False))
    assert len(deliveries) == 2
    past(*deliveries)
    for group in ("a", "b"):
        [got] = djqueue.receive(djqueue.group_queues("t.prices", group))
        assert got.payload == {"price": 2}
    assert {m.state for m in Message.objects.filter(pk__in=[d.pk for d in deliveries])} == {
        State.DEAD}
    with pytest.raises(InvalidMessage, match="expires must be a number of seconds"):
        djqueue.publish("t.prices", {"price": 3}, expires=-5)
