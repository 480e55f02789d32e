"""Ended workflows leave the database after RESULT_RETENTION, as finished task results
do, with their steps and edges; running ones, and ones that ended since, stay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import djqueue
from djqueue.conf import get_settings
from djqueue.maintenance.pruning import prune_history
from djqueue.models import StepDependency, Workflow, WorkflowStep
from tests import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def chain(*numbers: int) -> djqueue.tasks.workflow_handles.WorkflowHandle:
    return djqueue.chain(*(djqueue.step(tasks.wf_node, n) for n in numbers)).enqueue()


def rows_of(workflow_id: int) -> tuple[int, int, int]:
    return (Workflow.objects.filter(pk=workflow_id).count(),
            WorkflowStep.objects.filter(workflow_id=workflow_id).count(),
            StepDependency.objects.filter(workflow_id=workflow_id).count())


def test_ended_workflows_are_pruned_with_their_steps_and_running_ones_stay(settings):
    settings.DJQUEUE = {**settings.DJQUEUE, "PRUNE_BATCH": 3}  # batches of 3 steps
    old = [chain(1, 2), chain(3, 4, 5), chain(6)]
    recent = chain(7, 8)
    assert djqueue.drain("t.wf").acked == 8
    assert {h.refresh().status for h in [*old, recent]} == {"SUCCEEDED"}
    running = chain(9, 10)
    retention = timedelta(seconds=get_settings().RESULT_RETENTION)
    later = timezone.now() + retention + timedelta(minutes=1)
    # The recent one ended just before the pass: within its retention.
    Workflow.objects.filter(pk=recent.id).update(finished_at=later - timedelta(seconds=1))
    assert rows_of(old[1].id) == (1, 3, 2)

    assert prune_history(later) >= 3

    assert [rows_of(h.id) for h in old] == [(0, 0, 0)] * 3
    assert rows_of(recent.id) == (1, 2, 1)
    assert rows_of(running.id) == (1, 2, 1)
    assert running.refresh().status == "RUNNING"
    with pytest.raises(Workflow.DoesNotExist):
        djqueue.get_workflow(old[0].id)
    # The running one goes on, and leaves once it has ended and its retention passed.
    assert djqueue.drain("t.wf").acked == 2 and running.refresh().status == "SUCCEEDED"
    prune_history(later)
    assert rows_of(running.id) == (0, 0, 0) and rows_of(recent.id) == (1, 2, 1)
    prune_history(later + retention)
    assert rows_of(recent.id) == (0, 0, 0)
