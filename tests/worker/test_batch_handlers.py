"""Batch handlers (``@handler(queue, batch=N)``): a run takes a list of messages, and each
message is settled on its own (tests.handlers.record_batch and record_batch_async)."""

import asyncio
import logging
import signal
from collections import Counter
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

import djqueue
from djqueue.exceptions import ConfigurationError, InvalidProgress
from djqueue.models import History, Message, MessageLog, State
from djqueue.storage import handler_reports
from djqueue.worker import handler_logs, registry
from tests.conftest import run_async, wait_until
from tests.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_worker_hands_a_batch_handler_its_claims_in_lists_of_at_most_its_batch(spawn):
    djqueue.create_queue("t.batched")
    djqueue.send_batch("t.batched", [{"n": n} for n in range(250)])
    worker = spawn("djqueue_worker", "t.batched", "-b", "100", "--burst")
    assert worker.wait(60) == 0
    assert Counter(Effect.objects.values_list("key", flat=True)) == Counter(range(250))
    sizes = Counter(Effect.objects.values_list("attempt", flat=True))
    assert max(sizes) == 50, sizes  # claims of 100 cut in two
    assert History.objects.filter(queue__name="t.batched").count() == 250
    assert not Message.objects.filter(queue__name="t.batched").exists()


def test_batch_failures_fail_only_the_messages_it_names():
    djqueue.create_queue("t.batched", max_attempts=1)
    djqueue.send_batch("t.batched", [{"n": n, "fail": n in (3, 7)} for n in range(10)])
    drained = djqueue.drain("t.batched")
    assert (drained.runs, drained.acked, drained.failed, drained.dead_lettered) == (10, 8, 2, 2)
    assert set(Effect.objects.values_list("attempt", flat=True)) == {10}, "one run of ten"
    dead = {m.payload["n"]: m.errors[-1]["error"]
            for m in Message.objects.filter(state=State.DEAD)}
    assert sorted(dead) == [3, 7]
    assert dead[3].strip() == "Exception: refused 3"
    assert History.objects.filter(queue__name="t.batched").count() == 8


def test_an_exception_fails_every_message_of_the_run_as_it_says():
    djqueue.create_queue("t.batched", max_attempts=5)
    djqueue.send_batch("t.batched", [{"n": 1}, {"n": 2, "raise": "retry"}, {"n": 3}])
    before = timezone.now()
    drained = djqueue.drain("t.batched")
    assert (drained.runs, drained.failed, drained.acked) == (3, 3, 0)
    rows = list(Message.objects.filter(queue__name="t.batched"))
    assert [m.state for m in rows] == [State.SCHEDULED] * 3
    assert all(m.attempts == 1 for m in rows)
    assert all(m.visible_at >= before + timedelta(seconds=59) for m in rows)
    assert all("the service asked for a minute" in m.errors[-1]["error"] for m in rows)


def test_a_batch_runs_log_records_are_kept_with_each_of_its_messages():
    handler_logs.install()  # as a worker does at start
    djqueue.create_queue("t.batched", max_attempts=1)
    sent = djqueue.send_batch("t.batched", [{"n": n, "log": True, "fail": n == 1}
                                            for n in range(3)])
    drained = djqueue.drain("t.batched")
    assert (drained.runs, drained.acked, drained.dead_lettered) == (3, 2, 1)
    for message in sent:
        logs = djqueue.get_logs(message.pk)
        assert [(r.text, r.logger, r.attempt) for r in logs] == [
            ("a run of 3", "tests.reporting", 1)], message.payload
    with pytest.raises(InvalidProgress, match="in a batch handler's run"), \
            handler_reports.reporting(sent):
        djqueue.report_progress(0.5)


def test_a_large_batch_runs_records_are_kept_once_with_a_pointer_on_its_other_messages():
    handler_logs.install()
    djqueue.create_queue("t.batched")
    sent = djqueue.send_batch("t.batched", [{"n": n, "log": 30} for n in range(50)])
    drained = djqueue.drain("t.batched")
    assert (drained.runs, drained.acked) == (50, 50)
    first, *others = sent
    assert [r.text for r in djqueue.get_logs(first.pk)] == (
        ["a run of 50"] + [f"record {n}" for n in range(1, 30)])
    for message in others:
        [pointer] = djqueue.get_logs(message.pk)
        assert (pointer.level, pointer.logger) == (logging.WARNING, "djqueue.worker")
        assert pointer.text == (f"this message was one of 50 in a batch handler's run, which "
                                f"logged 30 record(s): they are kept with message {first.pk}")
    assert MessageLog.objects.count() == 30 + 49  # not 50 x 30


def test_batch_failures_naming_a_message_not_in_the_run_fails_the_whole_run():
    djqueue.create_queue("t.batched", max_attempts=1)
    djqueue.send_batch("t.batched", [{"n": 1}, {"n": 2, "raise": "stranger"}])
    drained = djqueue.drain("t.batched")
    assert (drained.failed, drained.acked) == (2, 0)
    errors = [m.errors[-1]["error"] for m in Message.objects.filter(state=State.DEAD)]
    assert len(errors) == 2
    assert all("names -1, which is not a message of this batch" in e for e in errors)


def test_an_async_batch_handler_runs_and_a_drain_limit_cuts_its_run():
    djqueue.create_queue("t.abatched")
    djqueue.send_batch("t.abatched", [{"n": n} for n in range(25)])
    first = djqueue.drain("t.abatched", limit=4)
    assert (first.runs, first.acked) == (4, 4)
    rest = djqueue.drain("t.abatched")
    assert (rest.runs, rest.acked) == (21, 21)
    assert Counter(Effect.objects.values_list("key", flat=True)) == Counter(range(25))
    assert sorted(Counter(Effect.objects.values_list("attempt", flat=True)).items()) == [
        (1, 1), (4, 4), (10, 20)]
    # The handler's ORM calls ran in asgiref's thread for sync code: close its connection.
    run_async(asyncio.sleep(0))


def test_a_batch_run_past_the_time_limit_fails_each_of_its_messages(spawn):
    djqueue.create_queue("t.batched", max_attempts=1)
    djqueue.send_batch("t.batched", [{"n": 1, "sleep": 30}, {"n": 2}, {"n": 3}])
    spawn("djqueue_worker", "t.batched", "-b", "10", "--time-limit", "0.5")
    wait_until(lambda: Message.objects.filter(state=State.DEAD).count() == 3, 30,
               "the three messages of the overdue run to be dead-lettered")
    for message in Message.objects.all():
        assert "TimeLimitExceeded: the handler ran longer than 0.5 s" in \
            message.errors[-1]["error"]


@pytest.mark.parametrize("options", [
    {"batch": 0}, {"batch": True}, {"batch": "50"}, {"batch": 10_001},
    {"batch": 5, "exactly_once": True},
])
def test_a_batch_handler_is_refused_where_it_cannot_work(options):
    with pytest.raises(ConfigurationError):
        registry.handler("t.nowhere", **options)


@pytest.mark.parametrize("queue", ["", "bad name!", "x" * 101, "a\x00b", None, 5, b"jobs"])
def test_a_handler_is_refused_for_what_is_no_queue_name(queue):
    """It was registered, and a worker serving every handler's queue then failed on it."""
    with pytest.raises(ConfigurationError, match="@handler takes a queue's name"):
        registry.handler(queue)
    assert queue not in registry.known_queues()


def test_a_worker_refuses_a_batch_handler_on_an_exactly_once_queue():
    djqueue.create_queue("t.batched", exactly_once=True)
    with pytest.raises(ConfigurationError, match="exactly-once and its handler takes batches"):
        registry.serving(["t.batched"])
    with pytest.raises(CommandError, match="exactly-once"):
        call_command("djqueue_worker", "t.batched", "--burst")


def test_a_batch_window_fills_a_list_from_later_claims(spawn):
    """t.windowed: batch 20, batch_wait 4 s. Three messages are claimed and wait; two
    sent after that join them, and the five run together once the window is out."""
    djqueue.create_queue("t.windowed")
    spawn("djqueue_worker", "t.windowed")
    for n in range(3):
        djqueue.send("t.windowed", {"n": n})
    wait_until(lambda: _claimed(3), 10, "the first three to be claimed")
    assert not Effect.objects.exists()
    for n in range(3, 5):
        djqueue.send("t.windowed", {"n": n})
    wait_until(lambda: Effect.objects.count() == 5, 20, "the window's run")
    assert sorted(Effect.objects.values_list("key", "attempt")) == [(n, 5) for n in range(5)]
    wait_until(lambda: History.objects.filter(queue__name="t.windowed").count() == 5, 10,
               "the five acks")


def test_a_full_list_leaves_its_window_at_once_and_a_stopping_worker_releases_the_rest(
        spawn):
    djqueue.create_queue("t.windowed", visibility_timeout=600)
    worker = spawn("djqueue_worker", "t.windowed", "-b", "100")
    djqueue.send_batch("t.windowed", [{"n": n} for n in range(25)])
    wait_until(lambda: Effect.objects.count() == 20 and _claimed(5), 10,
               "a run of twenty at once, five held in the window")
    assert set(Effect.objects.values_list("attempt", flat=True)) == {20}
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    left = Message.objects.filter(queue__name="t.windowed")
    assert sorted(m.state for m in left) == [State.READY] * 5
    assert Effect.objects.count() == 20


@pytest.mark.parametrize("options", [
    {"batch_wait": 1}, {"batch": 5, "batch_wait": 0}, {"batch": 5, "batch_wait": -1},
    {"batch": 5, "batch_wait": "1"}, {"batch": 5, "batch_wait": float("nan")},
])
def test_a_batch_window_is_refused_where_it_cannot_work(options):
    with pytest.raises(ConfigurationError, match="batch_wait"):
        registry.handler("t.nowhere", **options)


def test_a_worker_refuses_a_batch_window_not_shorter_than_the_lease():
    djqueue.create_queue("t.windowed", visibility_timeout=4)
    with pytest.raises(CommandError, match=r"batch_wait of queue 't.windowed' \(4 s\)"):
        call_command("djqueue_worker", "t.windowed", "--burst")
    with pytest.raises(CommandError, match=r"shorter than its lease \(3 s\)"):
        call_command("djqueue_worker", "t.windowed", "--burst", "--visibility-timeout", "3")


def _claimed(count: int) -> bool:
    return Message.objects.filter(queue__name="t.windowed", state=State.CLAIMED).count() == count
