"""djqueue.drain(): the handlers run in the test's own thread and transaction (this
module's tests are not transactional: each runs inside one rolled-back transaction,
as a Django TestCase does), and each run is settled as a worker settles it."""

import pytest

import djqueue
from djqueue.models import History, Message, State, Worker
from djqueue.tasks.compat import TaskResultStatus
from tests import tasks
from tests.models import Effect

pytestmark = pytest.mark.django_db


def test_handlers_run_inside_the_tests_transaction():
    djqueue.create_queue("t.record")
    djqueue.send_batch("t.record", [{"n": n} for n in range(1, 4)])
    drained = djqueue.drain("t.record")
    assert (drained.runs, drained.acked, drained.failed) == (3, 3, 0)
    assert sorted(Effect.objects.values_list("key", flat=True)) == [1, 2, 3]
    assert History.objects.count() == 3 and not Message.objects.exists()
    assert not Worker.objects.exists()  # no worker registered: nothing to deregister
    assert djqueue.drain("t.record").runs == 0


def test_failures_wait_for_their_backoff_unless_delayed_are_run():
    djqueue.create_queue("t.flaky", max_attempts=3, backoff=[600])
    recovers = djqueue.send("t.flaky", {"n": 1, "failures": 2})
    drained = djqueue.drain("t.flaky")
    assert (drained.runs, drained.failed, drained.acked) == (1, 1, 0)
    assert "ValueError: planned failure on attempt 1" in drained.errors[0]
    assert Message.objects.get(pk=recovers.id).state == State.SCHEDULED  # 600 s away
    drained = djqueue.drain("t.flaky", delayed=True)
    assert (drained.runs, drained.failed, drained.acked) == (2, 1, 1)
    assert History.objects.get(pk=recovers.id).attempts == 3
    doomed = djqueue.send("t.flaky", {"n": 2, "failures": 5})
    drained = djqueue.drain("t.flaky", delayed=True)
    assert (drained.runs, drained.failed, drained.dead_lettered) == (3, 3, 1)
    assert Message.objects.get(pk=doomed.id).state == State.DEAD


def test_postpone_and_retry_after_are_settled_as_asked():
    djqueue.create_queue("t.asks", max_attempts=2, backoff=[600])
    djqueue.send("t.asks", {"n": 1, "postpones": 2, "postpone": 30})
    djqueue.send("t.asks", {"n": 2, "failures": 1, "retry_after": 30})
    drained = djqueue.drain("t.asks")
    assert (drained.runs, drained.postponed, drained.failed) == (2, 1, 1)
    assert "RetryAfter: retry after 30 s" in drained.errors[0]
    drained = djqueue.drain("t.asks", delayed=True)
    assert (drained.runs, drained.postponed, drained.acked) == (3, 1, 2)
    assert sorted(History.objects.values_list("attempts", flat=True)) == [1, 2]


def test_a_limit_ends_a_drain_that_would_not_end():
    djqueue.create_queue("t.asks")
    djqueue.send("t.asks", {"n": 1, "postpones": 10**6, "postpone": 60})
    drained = djqueue.drain("t.asks", delayed=True, limit=5)
    assert (drained.runs, drained.postponed) == (5, 5)
    assert Message.objects.get().state == State.SCHEDULED
    for limit in (0, -1, 1.5, True, "5"):
        with pytest.raises(ValueError, match="limit of at least 1"):
            djqueue.drain("t.asks", limit=limit)


def test_tasks_and_every_handled_queue_by_default():
    result = tasks.add.enqueue(2, 3)
    djqueue.create_queue("t.record")
    djqueue.send("t.record", {"n": 7})
    drained = djqueue.drain()
    assert drained.acked == 2
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert list(Effect.objects.values_list("key", flat=True)) == [7]
