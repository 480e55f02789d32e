"""Waiting for a task's result and for a workflow to end (Celery's AsyncResult.get):
through a real worker process, with timeouts that end the wait and leave the task be."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

import djqueue
from djqueue.exceptions import NotFinished, TaskDeadLettered
from djqueue.models import State
from djqueue.storage.transitions import fail
from djqueue.tasks.compat import TaskResultStatus
from tests import tasks

pytestmark = pytest.mark.django_db(transaction=True)
BAD_WAIT = r"A wait's (timeout \(or None\)|interval) must be a number of seconds"


async def awaited(result):
    """await_for_result; then the connection its reads opened on asgiref's one thread for
    sync code is closed, as a request's end would close it (the test database is
    dropped after the run)."""
    try:
        return await djqueue.await_for_result(result, timeout=60)
    finally:
        await sync_to_async(connections.close_all)()


def test_a_wait_returns_the_finished_result_and_a_timeout_leaves_the_task_be(spawn):
    result = tasks.add.enqueue(2, 3)
    failing = tasks.explode.enqueue()
    started = time.monotonic()
    with pytest.raises(NotFinished, match=rf"Task result {result.id} had not finished "
                                          r"after 0.05 s \(it is READY\)"):
        djqueue.wait_for_result(result, timeout=0.05)  # no worker yet
    assert time.monotonic() - started < 5
    worker = spawn("djqueue_worker", "default")
    assert djqueue.wait_for_result(result, timeout=60) is result
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert djqueue.wait_for_result(failing, timeout=60).status == TaskResultStatus.FAILED
    assert failing.errors  # the task's error is on its result, not raised by the wait
    later = tasks.add.enqueue(4, 4)
    assert asyncio.run(awaited(later)).return_value == 8
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


@pytest.mark.parametrize("options", [
    {"timeout": -1}, {"timeout": float("nan")}, {"timeout": "1"}, {"timeout": True},
    {"interval": 0}, {"interval": None}, {"interval": float("inf")}])
def test_bad_timeouts_and_intervals_are_refused_before_any_read(options):
    result = tasks.add.enqueue(1, 1)
    with pytest.raises(ValueError, match=BAD_WAIT):
        djqueue.wait_for_result(result, **options)
    with pytest.raises(ValueError, match=BAD_WAIT):
        asyncio.run(djqueue.await_for_result(result, **options))


def test_a_workflow_handle_waits_for_the_workflow_to_end(spawn):
    handle = djqueue.chain(djqueue.step(tasks.wf_add, 1, 2),
                           djqueue.step(tasks.wf_add, 10).receiving()).enqueue()
    with pytest.raises(NotFinished, match=rf"Workflow {handle.id} had not finished after "
                                          r"0 s \(it is RUNNING; 2 of its 2 steps"):
        handle.wait(timeout=0)
    spawn("djqueue_worker", "t.wf", "t.wf-final")
    assert handle.wait(timeout=60) is handle
    assert handle.status == "SUCCEEDED" and handle.result == 13
    with pytest.raises(ValueError, match="A wait's timeout"):
        handle.wait(timeout=-1)


def test_a_task_whose_message_was_dead_lettered_reads_failed_until_redriven(spawn):
    """Its workers died on every attempt, say: no run ended it, so without this its
    result would read READY for ever, and a wait for it would never end."""
    result = tasks.add.enqueue(20, 22)
    [message] = djqueue.receive("default")
    dead = fail(message, "lease expired (held by host-1)", dead_letter=True)
    assert dead.state == State.DEAD
    assert djqueue.wait_for_result(result, timeout=5) is result
    assert result.status == TaskResultStatus.FAILED and result.finished_at is not None
    [error] = result.errors
    assert error.exception_class is TaskDeadLettered
    assert f"Its message {message.pk} was dead-lettered after 1 delivery" in error.traceback
    assert "lease expired (held by host-1)" in error.traceback
    assert result.worker_ids == [message.owner]
    assert djqueue.redrive(dead.queue, ids=[message.pk]) == 1
    result.refresh()
    assert result.status == TaskResultStatus.READY  # it will run again
    spawn("djqueue_worker", "default")
    assert djqueue.wait_for_result(result, timeout=60).return_value == 42
