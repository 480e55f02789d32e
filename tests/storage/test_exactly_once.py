"""Exactly-once runs (djqueue.storage.transitions.run_and_ack): the handler runs with its
message locked under its lease, the ack commits with the handler's writes, and
``messages_acked`` is sent once that commit is made."""

import pytest
from django.db import connection

import djqueue
from djqueue import signals
from djqueue.exceptions import NotOwner
from djqueue.models import History, Message, Outcome, State
from djqueue.storage.transitions import run_and_ack
from tests.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def claimed_one(queue: str) -> Message:
    djqueue.send(queue, {"n": 1})
    [message] = djqueue.receive(queue, max_messages=1)
    return message


def test_the_handler_runs_under_its_lease_and_the_ack_is_signalled_after_the_commit():
    djqueue.create_queue("eo.ok", exactly_once=True)
    message = claimed_one("eo.ok")
    seen: list[tuple] = []

    def acked(sender, messages, **kwargs):
        seen.append(("acked", [m.pk for m in messages], connection.in_atomic_block))

    def handler() -> None:
        seen.append(("ran", connection.in_atomic_block))
        Run.objects.create(key=1, group="eo", started=0.0, finished=0.0)

    signals.messages_acked.connect(acked)
    try:
        run_and_ack(message, handler)
    finally:
        signals.messages_acked.disconnect(acked)
    assert seen == [("ran", True), ("acked", [message.pk], False)]
    assert not Message.objects.filter(pk=message.pk).exists()
    assert History.objects.get(pk=message.pk).outcome == Outcome.ACKED
    assert Run.objects.filter(group="eo").count() == 1


def test_a_lost_lease_runs_nothing_and_a_failed_handler_rolls_back_with_its_writes():
    djqueue.create_queue("eo.lost", exactly_once=True)
    lost = claimed_one("eo.lost")
    Message.objects.filter(pk=lost.pk).update(lease_token="another receiver's")
    ran = []
    with pytest.raises(NotOwner):
        run_and_ack(lost, lambda: ran.append(1))
    assert ran == []

    failing = claimed_one("eo.lost")

    def handler() -> None:
        Run.objects.create(key=1, group="eo", started=0.0, finished=0.0)
        raise RuntimeError("the handler failed")

    with pytest.raises(RuntimeError):
        run_and_ack(failing, handler)
    row = Message.objects.get(pk=failing.pk)
    assert (row.state, row.lease_token) == (State.CLAIMED, failing.lease_token)
    assert not Run.objects.filter(group="eo").exists()
    assert not History.objects.filter(pk=failing.pk).exists()
