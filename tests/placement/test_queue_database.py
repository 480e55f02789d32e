"""A queue placed on a second database: the API, a worker, the reaper and django.tasks
find it there, and nothing of it is written to the default (home) database."""

from __future__ import annotations

import signal

import pytest

import djqueue
from djqueue.api import queue_operations
from djqueue.exceptions import ConfigurationError, InvalidMessage, QueueNotFound
from djqueue.models import History, Message, Queue, QueueDepth, State, TaskRecord, Worker
from tests.conftest import kill, wait_until
from tests.models import Effect
from tests.placement.conftest import PLACED_ENV, PLACEMENT_DATABASES, djqueue_rows

pytestmark = PLACEMENT_DATABASES


def test_a_ruled_queue_lives_on_its_database_and_the_api_finds_it_there():
    queue = djqueue.create_queue("placed.api", max_attempts=1)
    assert queue._state.db == "queues"
    assert Queue.objects.using("queues").filter(name="placed.api").exists()
    sent = djqueue.send("placed.api", {"n": 1})
    djqueue.send_batch("placed.api", [{"n": 2}, {"n": 3}], delay=600)
    assert [m.payload["n"] for m in djqueue.peek("placed.api")] == [1, 2, 3]
    assert djqueue.get_message(sent.pk, queue="placed.api").payload == {"n": 1}
    [got] = djqueue.receive("placed.api")
    assert got.pk == sent.pk and got._state.db == "queues"
    got.extend(60)
    got.ack()
    assert djqueue.finished(sent.pk, queue="placed.api") is not None
    assert queue_operations.retry_now([m.pk for m in djqueue.peek("placed.api")],
                                      queue="placed.api") == 2
    [failing] = djqueue.receive("placed.api")
    failing.nack(error="boom")  # max_attempts=1: dead at once
    assert Message.objects.using("queues").get(pk=failing.pk).state == State.DEAD
    assert djqueue.purge("placed.api") == 2
    assert not djqueue_rows("default"), "the home database was written to"


def test_create_queue_with_a_database_places_it_and_a_name_is_one_queue():
    djqueue.create_queue("elsewhere", database="queues")
    assert djqueue.get_queue("elsewhere")._state.db == "queues"
    djqueue.send("elsewhere", {"n": 1})
    assert Message.objects.using("queues").count() == 1
    assert not djqueue_rows("default")
    with pytest.raises(ConfigurationError, match="already exists on database 'queues'"):
        djqueue.create_queue("elsewhere", database="default")
    assert djqueue.create_queue("elsewhere", exist_ok=True)._state.db == "queues"
    with pytest.raises(ConfigurationError, match="places it on 'queues'"):
        djqueue.create_queue("placed.x", database="default")
    with pytest.raises(ConfigurationError, match="not one djqueue keeps queues on"):
        djqueue.create_queue("nowhere", database="no-such-alias")
    djqueue.create_queue("home.dlq")
    with pytest.raises(ConfigurationError, match="share a database"):
        djqueue.create_queue("placed.y", dead_letter_queue="home.dlq")
    with pytest.raises(QueueNotFound):
        djqueue.send("placed.never-created", {})


def test_redrive_stays_within_the_database():
    dlq = djqueue.create_queue("placed.dead")
    djqueue.create_queue("placed.src", max_attempts=1, dead_letter_queue=dlq)
    djqueue.create_queue("home.target")
    djqueue.send("placed.src", {"n": 1})
    [message] = djqueue.receive("placed.src")
    message.nack(error="boom")
    assert djqueue.peek("placed.dead")[0].state == State.DEAD
    with pytest.raises(InvalidMessage, match="within one database"):
        djqueue.redrive("placed.dead", to="home.target")
    assert djqueue.redrive("placed.dead") == 1
    assert djqueue.peek("placed.src")[0].state == State.READY
    assert not djqueue_rows("default").get("djqueue_message")


def test_one_worker_serves_queues_on_both_databases_and_registers_on_each(spawn):
    djqueue.create_queue("placed.work")
    djqueue.create_queue("t.record")
    # Both databases number their messages from 1: the worker keeps them apart.
    djqueue.send_batch("placed.work", [{"n": i} for i in range(200)])
    djqueue.send_batch("t.record", [{"n": i} for i in range(1000, 1200)])
    worker = spawn("djqueue_worker", "placed.work", "t.record", "-c", "2", "-b", "50",
                   env=PLACED_ENV)
    wait_until(lambda: Worker.objects.using("queues").exists()
               and Worker.objects.using("default").exists(), 30, "registered on both")
    wait_until(lambda: History.objects.using("queues").count() == 200
               and History.objects.using("default").count() == 200, 60, "both drained")
    keys = sorted(Effect.objects.values_list("key", flat=True))
    assert keys == [*range(200), *range(1000, 1200)], "lost or repeated"
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    assert not Worker.objects.using("queues").exists()
    assert not Worker.objects.using("default").exists()


def test_a_worker_on_a_placed_queue_writes_nothing_to_the_home_database(spawn):
    djqueue.create_queue("placed.work")
    djqueue.send_batch("placed.work", [{"n": i} for i in range(100)])
    worker = spawn("djqueue_worker", "placed.work", "-b", "20", env=PLACED_ENV)
    reaper = spawn("djqueue_reaper", env=PLACED_ENV)
    wait_until(lambda: History.objects.using("queues").count() == 100, 60, "drained")
    wait_until(lambda: QueueDepth.objects.using("queues").exists(), 30,
               "the reaper's statistics pass over the placed database")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    reaper.signal(signal.SIGTERM)
    assert reaper.wait(30) == 0, reaper.output()
    assert djqueue_rows("queues")["djqueue_history"] == 100
    assert not djqueue_rows("default"), "the home database was written to"


def test_the_reaper_returns_a_killed_workers_claims_on_the_placed_database(spawn):
    djqueue.create_queue("placed.slow", visibility_timeout=300)
    djqueue.send_batch("placed.slow", [{"n": i, "sleep": 60} for i in range(1, 3)])
    victim = spawn("djqueue_worker", "placed.slow", "-c", "2", "-b", "2", env=PLACED_ENV)
    wait_until(lambda: Effect.objects.filter(key__lt=0).count() == 2, 30, "both running")
    reaper = spawn("djqueue_reaper", env=PLACED_ENV)
    kill(victim)
    wait_until(lambda: Message.objects.using("queues").filter(state=State.READY).count() == 2,
               10, "claims returned within seconds (lease: 300 s)")
    rescuer = spawn("djqueue_worker", "placed.slow", "-c", "2", env=PLACED_ENV)
    wait_until(lambda: History.objects.using("queues").count() == 2, 30, "finished")
    assert sorted(Effect.objects.filter(key__gt=0).values_list("key", flat=True)) == [1, 2]
    for process in (rescuer, reaper):
        process.signal(signal.SIGTERM)
        assert process.wait(30) == 0, process.output()


@pytest.mark.parametrize("on_commit", [False, True])
def test_django_tasks_run_on_a_placed_queue_and_their_results_are_found(spawn, on_commit):
    from django.conf import settings
    from django.test import override_settings

    from tests.tasks import add

    tasks = {**settings.TASKS, "default": {**settings.TASKS["default"], "QUEUES": [
        "default", "placed.tasks"]}}
    if on_commit:
        tasks["default"]["OPTIONS"] = {**tasks["default"]["OPTIONS"],
                                       "ENQUEUE_ON_COMMIT": "default"}
    with override_settings(TASKS=tasks):
        placed_add = add.using(queue_name="placed.tasks")
        result = placed_add.enqueue(2, 3)
        assert Message.objects.using("queues").count() == 1
        if not on_commit:
            assert result.id.endswith("@queues")  # ids are per database
        worker = spawn("djqueue_worker", "placed.tasks", env={
            **PLACED_ENV, "DJQUEUE_TEST_TASK_QUEUES": "placed.tasks"})
        wait_until(lambda: placed_add.get_result(result.id).is_finished, 30, "the task ran")
        assert placed_add.get_result(result.id).return_value == 5
        assert TaskRecord.objects.using("queues").filter(pk=result.id).exists()
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.output()
    assert not djqueue_rows("default")
