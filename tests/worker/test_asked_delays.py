"""A handler says when its message is to run again: Postpone (not now: given back for
a while, the delivery uncounted, no error) and RetryAfter (a failure, retried after
the delay it names instead of the queue's backoff). Through a real worker process,
consume(), and django.tasks. The queues' backoff is 600 s, which no test waits out: a
message that came back sooner came back after the delay its handler asked for."""

import signal
from datetime import timedelta

import pytest
from django.utils import timezone

import djqueue
from djqueue.exceptions import InvalidMessage
from djqueue.models import Event, History, Message, Outcome, State, TraceEvent
from djqueue.tasks.compat import TaskResultStatus
from tests import tasks
from tests.conftest import wait_until
from tests.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def runs(n: int) -> int:
    return Effect.objects.filter(key=n).count()


def test_a_worker_postpones_and_retries_as_its_handler_asks(spawn):
    djqueue.create_queue("t.asks", max_attempts=2, backoff=[600], trace=True)
    postponed = djqueue.send("t.asks", {"n": 1, "postpones": 3, "postpone": 0.2})
    retried = djqueue.send("t.asks", {"n": 2, "failures": 1, "retry_after": 0.2})
    exhausted = djqueue.send("t.asks", {"n": 3, "failures": 5, "retry_after": 0.1})
    # Asked the impossible: the delivery fails with the reason, on the queue's backoff.
    invalid = djqueue.send("t.asks", {"n": 4, "postpones": 1, "postpone": -1})
    worker = spawn("djqueue_worker", "t.asks", "-c", "2")
    dead = Message.objects.filter(pk=exhausted.id, state=State.DEAD)
    wait_until(lambda: History.objects.count() == 2 and dead.exists() and runs(4) == 1, 60,
               f"two finished, one dead, one failed\n{worker.output()}",
               progress=Effect.objects.count)
    # Postponed three times, then acked: one attempt, no error, never dead-lettered
    # (max_attempts is 2).
    assert runs(1) == 4
    first = History.objects.get(pk=postponed.id)
    assert (first.outcome, first.attempts) == (Outcome.ACKED, 1)
    releases = TraceEvent.objects.filter(message_id=postponed.id, event=Event.RELEASED)
    assert [e.detail for e in releases] == ["released, visible again in 0.2 s"] * 3
    # Failed once and retried after 0.2 s, not the 600 s backoff.
    second = History.objects.get(pk=retried.id)
    assert (runs(2), second.outcome, second.attempts) == (2, Outcome.ACKED, 2)
    # A RetryAfter counts as an attempt: dead-lettered at max_attempts, with its error.
    third = dead.get()
    assert (runs(3), third.attempts, len(third.errors)) == (2, 2, 2)
    assert all("RetryAfter: retry after 0.1 s" in e["error"] for e in third.errors)
    # The invalid delay: a failure naming it, waiting out the backoff.
    left = Message.objects.get(pk=invalid.id)
    assert (left.state, left.attempts) == (State.SCHEDULED, 1)
    assert "Postpone asked for an invalid delay" in left.errors[-1]["error"]
    assert left.visible_at > timezone.now() + timedelta(seconds=500)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


def test_a_retry_after_records_its_cause():
    djqueue.create_queue("jobs", max_attempts=3, backoff=[600])
    djqueue.send("jobs", {"n": 1})
    with djqueue.consume("jobs") as message:
        try:
            raise ConnectionError("the service answered 503")
        except ConnectionError as exc:
            raise djqueue.RetryAfter(30) from exc
    row = Message.objects.get(pk=message.id)
    assert (row.state, row.attempts) == (State.SCHEDULED, 1)
    error = row.errors[-1]["error"]
    assert "ConnectionError: the service answered 503" in error
    assert "RetryAfter: retry after 30 s" in error
    assert 25 < (row.visible_at - timezone.now()).total_seconds() <= 30


def test_consume_gives_a_postponed_message_back_uncounted_and_goes_on():
    djqueue.create_queue("jobs", max_attempts=1, backoff=[600])
    sent = djqueue.send("jobs", {"n": 1})
    for _ in range(3):  # max_attempts is 1: a counted delivery would dead-letter it
        with djqueue.consume("jobs") as message:
            assert message.id == sent.id
            raise djqueue.Postpone(timedelta(minutes=1), "the mail server is busy")
        row = Message.objects.get(pk=sent.id)
        assert (row.state, row.attempts, row.errors) == (State.SCHEDULED, 0, None)
        assert 55 < (row.visible_at - timezone.now()).total_seconds() <= 60
        djqueue.api.queue_operations.retry_now([sent.id])
    with djqueue.consume("jobs") as message:
        assert message.attempts == 1  # the three postponed deliveries were not counted
    assert History.objects.get(pk=sent.id).outcome == Outcome.ACKED


@pytest.mark.parametrize("delay", [-1, float("nan"), 10**12, "soon",
                                   pytest.param(10**5000, id="5001 digits")])
def test_consume_fails_a_delivery_whose_asked_delay_is_invalid(delay):
    """5001 digits: the Postpone itself failed to be made before (its message wrote
    the int as text, which Python refuses past 4,300 digits)."""
    djqueue.create_queue("jobs", max_attempts=3, backoff=[600])
    djqueue.send("jobs", {"n": 1})
    with djqueue.consume("jobs") as message:
        raise djqueue.Postpone(delay)
    row = Message.objects.get(pk=message.id)
    assert (row.state, row.attempts) == (State.SCHEDULED, 1)
    assert "Postpone asked for an invalid delay: delay must be" in row.errors[-1]["error"]
    assert (row.visible_at - timezone.now()).total_seconds() > 500  # the backoff


def test_other_exceptions_still_leave_consume():
    djqueue.create_queue("jobs", max_attempts=3, backoff=[600])
    djqueue.send("jobs", {"n": 1})
    with pytest.raises(KeyError), djqueue.consume("jobs"):
        raise KeyError("missing")
    assert Message.objects.get().state == State.SCHEDULED


def test_a_task_postpones_and_retries_as_it_asks(spawn):
    # Its backend retries ValueError only; a RetryAfter is retried whatever it wraps.
    postponed = tasks.asks_later.enqueue(1, postpones=2, failures=0)
    retried = tasks.asks_later.enqueue(2, postpones=1, failures=2)
    exhausted = tasks.asks_later.enqueue(3, postpones=0, failures=5)  # MAX_ATTEMPTS 3
    worker = spawn("djqueue_worker", "t.asks.tasks", "-c", "2")
    for result in (postponed, retried, exhausted):
        wait_until(lambda r=result: r.refresh() or r.is_finished, 60,
                   f"task {result.id} to finish\n{worker.output()}")
    assert postponed.status == TaskResultStatus.SUCCESSFUL and postponed.return_value == 1
    assert (runs(1), postponed.attempts, postponed.errors) == (3, 1, [])
    assert retried.status == TaskResultStatus.SUCCESSFUL and retried.return_value == 2
    assert (runs(2), retried.attempts) == (4, 3)
    assert [e.exception_class for e in retried.errors] == [djqueue.RetryAfter] * 2
    assert "ConnectionError: the service answered 503" in retried.errors[0].traceback
    assert "RetryAfter: retry after 0.1 s" in retried.errors[0].traceback  # a timedelta
    assert exhausted.status == TaskResultStatus.FAILED
    assert (runs(3), exhausted.attempts) == (3, 3)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


def invalid_postponement_failed(result) -> None:
    """``result`` FAILED at once (its backend retries nothing), saying why."""
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    [error] = result.errors
    assert error.exception_class is InvalidMessage
    assert "Postpone asked for an invalid delay: delay must be" in error.traceback
    assert "djqueue.exceptions.Postpone" in error.traceback  # its cause
    message = History.objects.get(pk=int(result.id))
    assert message.outcome == Outcome.ACKED  # the message is done with: its task FAILED


def test_a_task_whose_postpone_is_out_of_bounds_fails_saying_why(spawn):
    """Under a worker (a first run, whose success the ack would copy)."""
    result = tasks.postpones_badly.enqueue(-1)
    worker = spawn("djqueue_worker", "t.tasks")
    wait_until(lambda: result.refresh() or result.is_finished, 60,
               f"task {result.id} to finish\n{worker.output()}")
    invalid_postponement_failed(result)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


def test_a_drained_task_whose_postpone_is_out_of_bounds_fails_saying_why():
    result = tasks.postpones_badly.enqueue(10**12)
    drained = djqueue.drain("t.tasks")
    assert (drained.runs, drained.acked, drained.failed) == (1, 1, 0)
    result.refresh()
    invalid_postponement_failed(result)
