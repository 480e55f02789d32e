"""A send to a partitioned queue wakes its workers into a claim on the partition that
got the message, not on every partition (djqueue.worker.database_pacing)."""

from __future__ import annotations

import contextlib

from django.db import connections
from django.test.utils import CaptureQueriesContext

import djqueue
from djqueue.api import worker_wakeups
from djqueue.models import History, Worker
from djqueue.storage import partitions
from djqueue.worker.database_claims import DatabaseClaims
from tests.conftest import wait_until
from tests.placement.conftest import PLACED_ENV, PLACEMENT_DATABASES

pytestmark = PLACEMENT_DATABASES
PARTS = ["queues", "p2", "p3"]


def statements(claims: DatabaseClaims, queues: list) -> tuple[list, dict[str, int]]:
    """One idle round of ``claims``: what it claimed, and the statements on each partition."""
    with contextlib.ExitStack() as stack:
        captured = {db: stack.enter_context(CaptureQueriesContext(connections[db]))
                    for db in PARTS}
        claimed = claims.claim(queues, [], 10, peek=True)
    return claimed.messages, {db: len(context) for db, context in captured.items()}


def test_an_idle_round_claims_only_on_the_partition_a_wake_up_names(settings):
    settings.DJQUEUE = {**settings.DJQUEUE, "POLL_MIN": 60, "POLL_MAX": 60}
    djqueue.create_queue("parted.paced")
    claims = DatabaseClaims("test-worker", visibility_timeout=None, where=None, hook=None,
                            on_error=lambda db, exc: None)
    queues = partitions.expand([djqueue.get_queue("parted.paced")])
    got, counted = statements(claims, queues)
    assert got == [] and all(counted.values()), counted  # each looked, found none

    sent = djqueue.send("parted.paced", {"n": 1})
    got, counted = statements(claims, queues)
    assert (got, counted) == ([], dict.fromkeys(PARTS, 0)), "each is put off for POLL_MIN"

    claims.pacing.woken(sent._state.db)
    got, counted = statements(claims, queues)
    assert [m.pk for m in got] == [sent.pk]
    assert {db for db, n in counted.items() if n} == {sent._state.db}, counted

    claims.pacing.woken(None)  # a datagram naming no database: every one is due
    got, counted = statements(claims, queues)
    assert got == [] and all(counted.values()), counted


def test_a_worker_polling_every_two_minutes_takes_each_partitions_message_at_once(spawn):
    djqueue.create_queue("parted.work")
    worker = spawn("djqueue_worker", "parted.work",
                   env={**PLACED_ENV, "DJQUEUE_TEST_POLL": "120"})
    wait_until(lambda: all(Worker.objects.using(db).exclude(wake_address="").exists()
                           for db in PARTS), 60, "the worker on every partition")
    worker_wakeups.wake_addresses.forget()
    # Each keyless send goes to the next partition; with a 120 s poll only the wake-up
    # naming that partition brings its message in before the wait below gives up.
    for n in range(len(PARTS)):
        djqueue.send("parted.work", {"n": n})
        wait_until(lambda n=n: sum(History.objects.using(db).count() for db in PARTS) == n + 1,
                   60, f"message {n}\n{worker.output()}")
    assert {db for db in PARTS if History.objects.using(db).exists()} == set(PARTS)
