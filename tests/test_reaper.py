"""The reaper: expired leases come back counted; several reapers at once are safe."""

from datetime import timedelta

import pytest
from django.utils import timezone

import djqueue
from djqueue.models import Message, State, Worker
from djqueue.reaper import Reaper
from tests.conftest import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def expire_all() -> None:
    Message.objects.filter(state=State.CLAIMED).update(
        visible_at=timezone.now() - timedelta(seconds=1))


def test_expired_lease_returns_counted_then_dead_letters():
    dlq = djqueue.create_queue("jobs.dead")
    djqueue.create_queue("jobs", max_attempts=2, dead_letter_queue=dlq)
    sent = djqueue.send("jobs", {"n": 1})
    [first] = djqueue.receive("jobs", visibility_timeout=60)
    expire_all()
    assert Reaper().tick().expired == 1
    row = Message.objects.get(pk=sent.pk)
    assert row.state == State.READY and row.attempts == 1
    assert "lease expired" in row.errors[0]["error"]
    with pytest.raises(djqueue.exceptions.NotOwner):
        first.ack()
    djqueue.receive("jobs")
    expire_all()
    Reaper().tick()
    row = Message.objects.get(pk=sent.pk)
    assert (row.state, row.queue_id, len(row.errors)) == (State.DEAD, dlq.pk, 2)


def test_stale_worker_is_reaped_and_its_claims_return():
    djqueue.create_queue("jobs")
    djqueue.send_batch("jobs", [{"n": i} for i in range(5)])
    Worker.objects.create(id="gone:1:abc", hostname="elsewhere", pid=1, lock_key="f" * 32,
                          heartbeat_at=timezone.now() - timedelta(hours=1))
    djqueue.receive("jobs", max_messages=5, owner="gone:1:abc", visibility_timeout=3600)
    report = Reaper().tick()
    assert (report.dead_workers, report.returned_from_dead) == (1, 5)
    assert Message.objects.filter(state=State.READY, attempts=1).count() == 5
    assert not Worker.objects.exists()


def test_concurrent_reapers_return_each_message_once():
    djqueue.create_queue("jobs", max_attempts=10)
    djqueue.send_batch("jobs", [{"n": i} for i in range(1200)])
    while djqueue.receive("jobs", max_messages=500):
        pass
    expire_all()
    totals = in_threads(lambda _: Reaper().tick().expired, 3)
    assert sum(totals) == 1200
    assert Message.objects.filter(state=State.READY).count() == 1200
    assert {len(m.errors) for m in Message.objects.all()} == {1}
