"""The reaper sets aside expired messages at the head of a queue with a ``message_ttl``
or whose head stood still (djqueue.storage.expiry.sweep_head), so that a queue no
worker serves does not fill with them and hold its senders back at ``max_depth``.

The tests wait for the clock to pass an expiry, never for a process to be late."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

import djqueue
from djqueue.conf import get_settings
from djqueue.exceptions import QueueFull
from djqueue.maintenance.reaper import Reaper
from djqueue.models import Message, State
from djqueue.storage import expiry
from tests.conftest import wait_until, write_unreadable_time

pytestmark = pytest.mark.django_db(transaction=True)


def past(*messages: Message) -> None:
    last = max(expiry.expires_at(m) for m in messages)
    wait_until(lambda: time.time() > last, 30, "the expiry to pass", interval=0.01)


def test_a_queue_no_worker_serves_is_emptied_of_expired_messages_and_takes_sends_again():
    dead = djqueue.create_queue("quotes.dead")
    djqueue.create_queue("quotes", message_ttl=0.2, max_depth=5, dead_letter_queue=dead)
    sent = djqueue.send_batch("quotes", [{"n": i} for i in range(5)])
    with pytest.raises(QueueFull):
        djqueue.send("quotes", {"n": 5})
    djqueue.pause("quotes")  # no claim reaches them: the reaper alone sets them aside
    past(*sent)
    assert Reaper().tick().past_expiry == 5
    rows = list(Message.objects.filter(pk__in=[m.pk for m in sent]))
    assert {(r.state, r.queue_id, r.attempts) for r in rows} == {(State.DEAD, dead.pk, 0)}
    assert all(r.errors[-1]["error"].startswith("Expired at ") for r in rows)
    assert all(expiry.EXPIRES_HEADER not in (r.headers or {}) for r in rows)
    assert djqueue.send("quotes", {"n": 5}).state == State.READY  # depth 0 again
    assert Reaper().tick().past_expiry == 0  # its expiry is 0.2 s away


def test_the_sweep_stops_at_the_first_live_message_of_the_head(monkeypatch):
    """In claim order, rounds of SWEEP_BATCH (2 here) go on while a round found only
    expired messages: what is behind a live one waits for a claim, as at RabbitMQ."""
    monkeypatch.setattr(expiry, "SWEEP_BATCH", 2)
    djqueue.create_queue("quotes", message_ttl=0.2)
    first = djqueue.send_batch("quotes", [{"n": i} for i in range(3)])
    live = djqueue.send("quotes", {"n": "live"}, expires=3600)  # its own expiry wins
    behind = djqueue.send("quotes", {"n": 4})
    past(*first, behind)
    assert Reaper().tick().past_expiry == 3
    states = dict(Message.objects.values_list("pk", "state"))
    assert [states[m.pk] for m in first] == [State.DEAD] * 3
    assert (states[live.pk], states[behind.pk]) == (State.READY, State.READY)
    [got] = djqueue.receive("quotes", max_messages=10)  # the claim sets the last aside
    assert got.pk == live.pk
    assert Message.objects.get(pk=behind.pk).state == State.DEAD


def test_a_queue_without_a_ttl_is_swept_once_its_head_stood_still():
    """Without a message_ttl a queue is swept only when the last depth sample showed
    its oldest ready message waiting over STATS_INTERVAL (0.5 s in the tests): a head
    its workers keep moving is left to their claims."""
    djqueue.create_queue("plain")
    message = djqueue.send("plain", {"n": 1}, expires=0.2)
    past(message)
    assert Reaper().tick().past_expiry == 0  # no depth sample yet; this tick takes one
    assert Message.objects.get(pk=message.pk).state == State.READY
    stood_still = message.sent_at + timedelta(seconds=get_settings().STATS_INTERVAL)
    wait_until(lambda: timezone.now() > stood_still, 30, "the head to stand still",
               interval=0.01)
    assert Reaper().tick().past_expiry == 1
    dead = Message.objects.get(pk=message.pk)
    assert (dead.state, dead.attempts) == (State.DEAD, 0)
    assert dead.errors[-1]["error"].startswith("Expired at ")


def test_a_claim_sets_aside_what_no_sweep_has_reached():
    djqueue.create_queue("plain")
    message = djqueue.send("plain", {"n": 1}, expires=0.2)
    past(message)
    assert djqueue.receive("plain") == []
    assert Message.objects.get(pk=message.pk).state == State.DEAD


def test_an_expired_message_whose_row_cannot_be_read_is_swept_with_the_others():
    """One expired message at a paused queue's head whose ``sent_at`` no driver reads
    back (a hand edit) failed the sweep of that queue at every pass, so nothing there
    expired any more: it is dead-lettered with the reading's error now, and the others
    with their expiry. (On MariaDB the ORM reads a zero date as nothing, which the
    expiry's error has to do without.)"""
    dead = djqueue.create_queue("quotes.dead")
    djqueue.create_queue("quotes", message_ttl=0.2, dead_letter_queue=dead)
    sent = djqueue.send_batch("quotes", [{"n": i} for i in range(3)])
    djqueue.pause("quotes")
    past(*sent)
    write_unreadable_time("djqueue_message", "sent_at", sent[1].pk)
    swept = Reaper().tick().past_expiry
    rows = {r.pk: r for r in Message.objects.filter(pk__in=[m.pk for m in sent])}
    assert {(r.state, r.queue_id) for r in rows.values()} == {(State.DEAD, dead.pk)}
    assert [rows[m.pk].errors[-1]["error"].startswith("Expired at ") for m in sent] == [
        True, connection.vendor == "mysql", True]
    assert swept == 3
    assert djqueue.send("quotes", {"n": 3}).state == State.READY
