"""Cancelling and retrying a workflow (what its handle's ``cancel()`` and ``retry()``
and the admin's buttons call). Each is one transaction that locks the workflow's
row first, as the join does (djqueue.tasks.workflow_joins). A time of it that no
driver reads back (a hand edit) is read as None (djqueue.storage.unreadable_rows):
an unreadable end is an end not yet written, which the cancel or retry writes."""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from django.db import transaction

from djqueue.exceptions import InvalidWorkflow, WorkflowBusy, given_id, shown_value
from djqueue.models import StepDependency, StepState, Workflow, WorkflowState, WorkflowStep
from djqueue.storage import dialects
from djqueue.storage.unreadable_rows import first_row
from djqueue.tasks import step_checks, workflow_joins


def cancel(workflow_id: int) -> bool:
    """Stop a running workflow: waiting steps never start, queued ones are withdrawn (or,
    when a worker has just taken one, settle as cancelled before their task starts);
    running ones finish. Returns STATE_TTL (50 ms) after its commit, when no worker
    can start one of its steps any more. False if it had already ended."""
    db = dialects.alias()
    with transaction.atomic(using=db):
        workflow = read_workflow(db, workflow_id, lock=True)
        if workflow.state != WorkflowState.RUNNING:
            return False
        workflow.state = WorkflowState.CANCELLED
        workflow.error = "cancelled"
        workflow.steps_left -= workflow_joins.cancel_unstarted(db, workflow)
        workflow_joins.save_workflow(db, workflow)
    if not transaction.get_connection(db).in_atomic_block:
        # Workers trust a running state for STATE_TTL: once this has passed, none will
        # start a step of this workflow (see step_checks._workflow_state). Inside the caller's
        # transaction, the commit is theirs, and so is waiting after it.
        time.sleep(step_checks.STATE_TTL)
    return True


def retry(workflow_id: int) -> int:
    """Run again the failed, cancelled and skipped steps and every step after them; the
    steps that succeeded keep their results. Returns how many steps will run."""
    db = dialects.alias()
    with transaction.atomic(using=db):
        workflow = read_workflow(db, workflow_id, lock=True)
        if workflow.state not in (WorkflowState.FAILED, WorkflowState.CANCELLED):
            raise WorkflowBusy(f"Workflow {workflow_id} is {workflow.get_state_display()}: "
                               "only a failed or cancelled one is retried")
        if workflow.steps_left:
            raise WorkflowBusy(f"Workflow {workflow_id} still has {workflow.steps_left} "
                               "step(s) queued or running: retry once they have settled")
        steps = WorkflowStep.objects.using(db).filter(workflow_id=workflow_id)
        states = dict(steps.values_list("position", "state"))
        edges = list(StepDependency.objects.using(db).filter(workflow_id=workflow_id)
                     .values_list("parent", "child"))
        children: dict[int, list[int]] = defaultdict(list)
        for parent, child in edges:
            children[parent].append(child)
        redo = {p for p, state in states.items() if state != StepState.SUCCEEDED}
        frontier = list(redo)
        while frontier:
            frontier = [c for p in frontier for c in children[p] if c not in redo]
            redo.update(frontier)
        waits = Counter(child for parent, child in edges if parent in redo and child in redo)
        by_count: dict[int, list[int]] = defaultdict(list)
        for position in redo:
            by_count[waits[position]].append(position)
        for count, positions in by_count.items():
            for chunk in workflow_joins.chunks(sorted(positions)):
                steps.filter(position__in=chunk).update(
                    state=StepState.WAITING, parents_left=count, result=None, error="",
                    error_class="", started_at=None, finished_at=None)
        workflow.state, workflow.error, workflow.failed = WorkflowState.RUNNING, "", 0
        workflow.steps_left, workflow.finished_at = len(redo), None
        first: list[WorkflowStep] = []
        for chunk in workflow_joins.chunks(sorted(by_count.get(0, []))):
            first += steps.filter(position__in=chunk)
        skipped = workflow_joins.start(db, workflow, first)
        if skipped:
            workflow_joins.start_children(db, workflow, skipped)
        workflow_joins.save_workflow(db, workflow, reopened=workflow.steps_left > 0)
    return len(redo)


def read_workflow(db: str, workflow_id: int, *, lock: bool = False) -> Workflow:
    """Workflow ``workflow_id`` of ``db`` (locked, with ``lock``), a time of it no driver
    reads back as None; Workflow.DoesNotExist if there is none (InvalidWorkflow if
    ``workflow_id`` is no int)."""
    given_id(workflow_id, InvalidWorkflow, "A workflow id is an int")
    rows = Workflow.objects.using(db).filter(pk=workflow_id)
    workflow = first_row(rows.select_for_update() if lock else rows)
    if workflow is None:
        raise Workflow.DoesNotExist(f"No workflow {shown_value(workflow_id)} on database {db!r}.")
    return workflow
