"""A queue row holding absurd values (written past validation, as an old row would be):
a reaper and a worker beside it stay up and serve the other queues: 20 s in
``make test`` (a hundred reaper passes at the tests' 0.2 s interval, each of its
steps run over the row from its first pass), the minute the hardening issue asked
for in ``make soak`` (``DJQUEUE_ABSURD_RUN_SECONDS=60``)."""

from __future__ import annotations

import os
import time

import pytest
from django.db import connection
from django.utils import timezone

import djqueue
from djqueue.maintenance import queue_errors
from djqueue.models import Message, Queue, State
from tests.conftest import wait_until
from tests.models import Effect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
RUN_SECONDS = int(os.environ.get("DJQUEUE_ABSURD_RUN_SECONDS", "20"))


def test_a_reaper_and_a_worker_outlive_a_queue_row_of_absurd_values(spawn):
    good = djqueue.create_queue("t.record")
    bad = djqueue.create_queue("t.flaky", dedup_window=60)
    huge = float("inf") if connection.vendor == "postgresql" else 1e300
    Queue.objects.filter(pk=bad.pk).update(  # past create_queue's checks, as an old row
        visibility_timeout=huge, retention=huge, dedup_window=huge,
        backoff=[1e300, -5, "not a number"], max_attempts=3)
    # Claims of the bad queue whose lease is over: the reaper must return them.
    djqueue.send_batch(bad, [{"n": -i, "failures": 0} for i in range(1, 6)])
    held = djqueue.receive(bad, max_messages=5, owner="gone")
    Message.objects.filter(pk__in=[m.pk for m in held]).update(visible_at=timezone.now())

    reaper = spawn("djqueue_reaper")
    worker = spawn("djqueue_worker", "t.flaky", "t.record", "-c", "2")
    wait_until(lambda: not Message.objects.filter(owner="gone").exists(), 30,
               "the reaper returned the bad queue's expired claims")
    deadline = time.monotonic() + RUN_SECONDS
    n = 0
    while time.monotonic() < deadline:
        djqueue.send(good, {"n": n})
        djqueue.send(bad, {"n": 100_000 + n, "failures": 1}, dedup_key=f"k{n}")
        wait_until(lambda k=n: Effect.objects.filter(key=k).exists(), 20,
                   f"the good queue's message {n} ran")
        assert reaper.popen.poll() is None, reaper.output()
        assert worker.popen.poll() is None, worker.output()
        n += 1
    assert n >= 20  # the good queue flowed all along
    # Every failure of the bad queue was scheduled, clamped to the longest delay.
    wait_until(lambda: not Message.objects.filter(queue=bad, state=State.CLAIMED).exists(),
               30, "the bad queue's deliveries settled")
    retried = Message.objects.filter(queue=bad, state=State.SCHEDULED)
    assert retried.exists()
    assert all(m.visible_at.year < timezone.now().year + 11 for m in retried)
    assert Queue.objects.get(pk=bad.pk).errors_seen == 0  # clamped: nothing failed
    for process in (reaper, worker):
        assert "Traceback" not in process.output(), process.output()


def test_an_error_serving_one_queue_is_counted_on_it():
    queue = djqueue.create_queue("counted")
    queue_errors.note_error(queue.pk, "reaper: OverflowError: too big")
    queue_errors.note_error(queue.pk, "pruning: ValueError: x" * 1000)
    row = Queue.objects.get(pk=queue.pk)
    assert row.errors_seen == 2
    assert row.last_error.startswith("pruning: ValueError") and len(row.last_error) == 2000
