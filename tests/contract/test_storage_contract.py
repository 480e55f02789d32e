"""The storage contract: what every database must show, whichever claim engine serves it.

River keeps one driver test suite that each database driver must pass; this is
djqueue's. It runs unchanged on MariaDB, PostgreSQL and SQLite (``make test``
runs the suite once per database) and speaks only through djqueue.storage's
interfaces: the claim engines, the claims, the transitions and the one path that
makes messages ready again.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

import djqueue
from djqueue.exceptions import InvalidMessage, NotOwner
from djqueue.models import Message, State
from djqueue.storage import claim_engines, requeueing, transitions
from djqueue.storage.claim_resume import ready_again, resume_points
from djqueue.storage.claims import ack_and_claim
from djqueue.storage.receiver_claims import PromotionClock, claim_ready
from tests.conftest import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def claim(queue, limit, owner="contract"):
    return ack_and_claim([], [queue], limit, owner=owner)[1]


def test_each_database_has_its_engine():
    engine = claim_engines.engine_for(connection)
    if connection.vendor == "sqlite":
        assert engine is claim_engines.SERIAL and not engine.resumes_claims
    else:
        assert engine is claim_engines.ROW_LOCKING and engine.resumes_claims


def test_a_claim_takes_priority_then_send_order_and_stamps_a_lease():
    queue = djqueue.create_queue("contract.order", visibility_timeout=40)
    low = djqueue.send_batch(queue, [{"n": n} for n in range(3)])
    high = djqueue.send(queue, {"n": "high"}, priority=5)
    before = timezone.now()
    claimed = claim(queue, 3, owner="me")
    assert [m.pk for m in claimed] == [high.pk, low[0].pk, low[1].pk]
    rows = {m.pk: m for m in Message.objects.filter(pk__in=[m.pk for m in claimed])}
    for message in claimed:
        row = rows[message.pk]
        assert row.state == message.state == State.CLAIMED
        assert row.owner == message.owner == "me"
        assert row.lease_token == message.lease_token != ""
        assert row.attempts == message.attempts == 1
        assert row.visible_at == message.visible_at >= before + timedelta(seconds=39)
    assert len({m.lease_token for m in claimed}) == 1


def test_sqlite_before_3_35_reads_its_claim_back_by_the_lease_token(monkeypatch):
    """SQLite's claim returns its rows from the UPDATE (RETURNING, SQLite 3.35+); an
    older SQLite, without RETURNING, reads them back by their lease token, in the
    same claim order."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's claim engine only")
    queue = djqueue.create_queue("contract.token")
    low = djqueue.send_batch(queue, [{"n": n} for n in range(3)])
    high = djqueue.send(queue, {"n": "high"}, priority=5)
    monkeypatch.setattr(connection.features, "can_return_columns_from_insert", False)
    claimed = claim(queue, 3, owner="old")
    assert [m.pk for m in claimed] == [high.pk, low[0].pk, low[1].pk]
    assert {(m.state, m.owner, m.attempts) for m in claimed} == {(State.CLAIMED, "old", 1)}
    assert claim(queue, 3, owner="old")[0].pk == low[2].pk
    assert claim(queue, 3, owner="old") == []


def test_concurrent_claimers_never_share_a_message():
    queue = djqueue.create_queue("contract.concurrent")
    djqueue.send_batch(queue, [{"n": n} for n in range(400)])

    def drain(slot: int) -> list[int]:
        taken: list[int] = []
        while batch := claim(queue, 7, owner=f"claimer-{slot}"):
            taken += [m.pk for m in batch]
        return taken

    taken = [pk for got in in_threads(drain, 4) for pk in got]
    assert len(taken) == len(set(taken)) == 400


def test_an_ack_needs_the_lease_and_deletes_into_history():
    queue = djqueue.create_queue("contract.ack")
    djqueue.send_batch(queue, [{"n": 1}, {"n": 2}])
    first, second = claim(queue, 2)
    stale = Message.objects.get(pk=second.pk)
    stale.lease_token = "not-the-lease"
    assert djqueue.ack_many([first, stale]) == [first]
    assert djqueue.finished(first.pk) is not None
    assert Message.objects.filter(pk=second.pk, state=State.CLAIMED).exists()
    for change in (stale.ack, lambda: stale.extend(5),
                   lambda: transitions.fail(stale, "late")):
        with pytest.raises(NotOwner):
            change()
    assert transitions.release([stale]) == 0


def test_a_release_is_not_counted_and_a_failure_is():
    queue = djqueue.create_queue("contract.fail", max_attempts=2, backoff=[0])
    djqueue.send(queue, {"n": 1})
    [message] = claim(queue, 1)
    assert transitions.release([message]) == 1
    [message] = claim(queue, 1)
    assert message.attempts == 1
    transitions.fail(message, "first")
    [message] = claim(queue, 1)
    assert message.attempts == 2 and message.errors[0]["error"] == "first"
    transitions.fail(message, "second")
    row = Message.objects.get(pk=message.pk)
    assert row.state == State.DEAD and [e["error"] for e in row.errors] == ["first", "second"]


def test_messages_readied_again_are_claimed_before_later_ones():
    """ready_again drops the claim's resume point, so a released message is found where
    it was, ahead of messages sent after it, on every engine."""
    queue = djqueue.create_queue("contract.ready_again")
    djqueue.send_batch(queue, [{"n": n} for n in range(6)])
    first = claim(queue, 3)
    ready_again(Message.objects.filter(pk=first[0].pk), state=State.READY, owner="",
                lease_token="")
    assert resume_points.get("default", queue.pk) is None
    assert claim(queue, 1)[0].pk == first[0].pk


def test_due_messages_are_promoted_once_across_concurrent_promoters():
    queue = djqueue.create_queue("contract.promote")
    djqueue.send_batch(queue, [{"n": n} for n in range(50)], delay=30)
    Message.objects.filter(queue=queue).update(visible_at=timezone.now() - timedelta(seconds=1))
    promoted = in_threads(lambda _: requeueing.promote_due([queue.pk]), 3)
    assert sum(promoted) == 50
    assert Message.objects.filter(queue=queue, state=State.READY).count() == 50


def test_returned_claims_count_an_attempt_and_are_ready_at_once():
    queue = djqueue.create_queue("contract.return")
    djqueue.send_batch(queue, [{"n": n} for n in range(3)])
    claim(queue, 3, owner="dead-worker")
    returned = requeueing.return_claims(Message.objects.filter(owner="dead-worker"),
                                         "worker {owner} died", 10)
    assert returned == 3
    rows = list(Message.objects.filter(queue=queue))
    assert {m.state for m in rows} == {State.READY}
    assert {m.errors[-1]["error"] for m in rows} == {"worker dead-worker died"}


def test_a_paused_queue_is_not_claimed_but_acks_still_ride():
    queue = djqueue.create_queue("contract.paused")
    djqueue.send_batch(queue, [{"n": 1}, {"n": 2}])
    [held] = claim(queue, 1)
    djqueue.pause(queue)
    acked, claimed = claim_ready([djqueue.get_queue(queue.name, fresh=True)], 5, owner="c",
                                 visibility_timeout=None, clock=PromotionClock(), acks=[held])
    assert acked == [held] and claimed == []


def test_bad_delays_are_refused_before_anything_changes():
    queue = djqueue.create_queue("contract.delay")
    djqueue.send(queue, {"n": 1})
    [message] = claim(queue, 1)
    for delay in (-1, float("nan"), float("inf"), "5", True):
        with pytest.raises(InvalidMessage):
            transitions.release([message], delay=delay)
    assert Message.objects.get(pk=message.pk).state == State.CLAIMED
