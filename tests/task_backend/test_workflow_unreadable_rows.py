"""A workflow whose row, or a step's, holds a time no driver reads back (a hand edit,
another tool: PostgreSQL's 'infinity', text on SQLite that is no date; MariaDB's
driver reads its zero date as None) goes on to its end, and its handle, cancel and
retry read it. Before, the join's lock of the workflow row, or its read of the steps
it starts, failed at every ack of a step: the step's message was retried until it
was dead, and the workflow stayed RUNNING; a handle's status, steps, cancel and retry
raised the driver's error (docs/operations.md).
"""

from __future__ import annotations

import pytest

import djqueue
from djqueue.models import Workflow, WorkflowStep
from djqueue.storage.transitions import fail
from djqueue.tasks.workflow_handles import WorkflowHandle
from tests import tasks
from tests.conftest import write_unreadable_time

pytestmark = pytest.mark.django_db(transaction=True)


def _chain() -> WorkflowHandle:
    return djqueue.chain(djqueue.step(tasks.wf_node, 1).named("first"),
                         djqueue.step(tasks.wf_node, 2).named("second")).enqueue()


def _unreadable(table: str, column: str, handle: WorkflowHandle) -> None:
    rows = ([handle.id] if table == "djqueue_workflow" else list(
        WorkflowStep.objects.filter(workflow_id=handle.id).values_list("pk", flat=True)))
    for row in rows:
        write_unreadable_time(table, column, row)


@pytest.mark.parametrize(("table", "column"), [
    ("djqueue_workflow", "created_at"), ("djqueue_workflow", "finished_at"),
    ("djqueue_workflowstep", "started_at"), ("djqueue_workflowstep", "finished_at")])
def test_a_workflow_whose_times_cannot_be_read_runs_to_its_end(table, column):
    handle = _chain()
    _unreadable(table, column, handle)
    reread = djqueue.get_workflow(handle.id)
    assert (reread.status, reread.is_finished) == ("RUNNING", False)
    assert [s.name for s in reread.steps] == ["first", "second"]
    drained = djqueue.drain("t.wf")
    assert (drained.runs, drained.acked, drained.failed) == (2, 2, 0), drained.errors
    assert handle.wait(timeout=5).status == "SUCCEEDED" and handle.results == [1, 2]
    # What ended it wrote its end and its steps' times: each reads again.
    assert Workflow.objects.filter(pk=handle.id).values_list("finished_at", flat=True).get()
    assert all(s.started_at and s.finished_at for s in WorkflowStep.objects.all())


def test_a_failed_workflow_whose_times_cannot_be_read_is_read_and_retried():
    handle = _chain()
    [message] = djqueue.receive("t.wf")
    fail(message, "lease expired (held by host-1)", dead_letter=True)
    assert handle.wait(timeout=5).status == "FAILED"
    for column in ("created_at", "finished_at"):
        _unreadable("djqueue_workflow", column, handle)
    for column in ("started_at", "finished_at"):
        _unreadable("djqueue_workflowstep", column, handle)
    reread = djqueue.get_workflow(handle.id)
    assert (reread.status, reread.is_finished) == ("FAILED", True)  # by its counters
    assert [s.get_state_display() for s in reread.steps] == ["failed", "cancelled"]
    assert [s.finished_at for s in reread.steps] == [None, None]
    assert reread.wait(timeout=0).status == "FAILED"
    assert reread.retry() == 2
    assert djqueue.drain("t.wf").acked == 2
    assert reread.wait(timeout=5).status == "SUCCEEDED" and reread.results == [1, 2]


def test_a_running_workflow_whose_times_cannot_be_read_is_cancelled():
    handle = _chain()
    for column in ("created_at", "finished_at"):
        _unreadable("djqueue_workflow", column, handle)
    assert djqueue.get_workflow(handle.id).cancel() is True
    assert handle.refresh().status == "CANCELLED" and handle.is_finished
    assert [s.get_state_display() for s in handle.steps] == ["cancelled", "cancelled"]
    # The cancel wrote its end again.
    assert Workflow.objects.filter(pk=handle.id).values_list("finished_at", flat=True).get()
    assert djqueue.drain("t.wf").runs == 0
