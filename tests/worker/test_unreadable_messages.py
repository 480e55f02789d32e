"""A ready message whose row holds a time no driver reads back (a hand edit, another
tool): it is dead-lettered with the reading's error, and the rest of its queue flows.
Before, it failed every claim of its queue: a receive raised, and a worker left the
database for a while at each failure (on the old code here: a receive raised the
driver's error on every database, and the worker test timed out waiting for the nine
readable messages while the worker logged "Claim on database default failed")."""

import pytest

import djqueue
from djqueue.models import History, Message, State
from tests.conftest import wait_until, write_unreadable_time
from tests.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def _queue_with_an_unreadable_message(name: str, count: int) -> tuple[int, int]:
    """Queue ``name`` (its dead letters in ``name``.dead) holding ``count`` messages,
    the second of which has a sent time that cannot be read; (its id, the dead queue's)."""
    dead = djqueue.create_queue(f"{name}.dead")
    djqueue.create_queue(name, dead_letter_queue=dead)
    djqueue.send_batch(name, [{"n": i} for i in range(count)])
    unreadable = Message.objects.filter(queue__name=name).order_by("id")[1].pk
    write_unreadable_time("djqueue_message", "sent_at", unreadable)
    return unreadable, dead.pk


def _assert_dead_lettered(message_id: int, dead_queue: int) -> None:
    row = Message.objects.get(pk=message_id)  # readable again: its times were set
    assert (row.state, row.queue_id) == (State.DEAD, dead_queue)
    assert row.sent_at is not None and row.claimed_at is None
    assert "its row could not be read (" in row.errors[-1]["error"], row.errors


def test_a_receive_gets_the_others_and_the_unreadable_one_is_dead_lettered():
    unreadable, dead = _queue_with_an_unreadable_message("jobs", 4)
    got = djqueue.receive("jobs", max_messages=4)
    assert sorted(m.payload["n"] for m in got) == [0, 2, 3]
    _assert_dead_lettered(unreadable, dead)


def test_a_worker_runs_the_rest_of_the_queue_past_an_unreadable_message(spawn):
    unreadable, dead = _queue_with_an_unreadable_message("t.record", 10)
    worker = spawn("djqueue_worker", "t.record")
    wait_until(lambda: History.objects.count() == 9, 30,
               f"the nine readable messages to run\n{worker.output()}")
    assert sorted(Effect.objects.values_list("key", flat=True)) == [0, *range(2, 10)]
    _assert_dead_lettered(unreadable, dead)
    assert "could not be read and was dead-lettered" in worker.output()
    assert "Claim on database default failed" not in worker.output()
