"""Batch handlers (``@handler(queue, batch=N)``): a run takes a list of messages, and each
message is settled on its own (tests.handlers.record_batch and record_batch_async)."""

from collections import Counter
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

import djqueue
from djqueue.exceptions import ConfigurationError
from djqueue.models import History, Message, State
from djqueue.worker import registry
from tests.conftest import wait_until
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


def test_a_worker_refuses_a_batch_handler_on_an_exactly_once_queue():
    djqueue.create_queue("t.batched", exactly_once=True)
    with pytest.raises(ConfigurationError, match="exactly-once and its handler takes batches"):
        registry.serving(["t.batched"])
    with pytest.raises(CommandError, match="exactly-once"):
        call_command("djqueue_worker", "t.batched", "--burst")
