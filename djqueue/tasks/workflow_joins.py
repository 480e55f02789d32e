"""The workflow join: settling a step in its message's ack transaction, and starting
what waited for it.

Why it is exact: a step is settled only while it is READY (read with a row lock),
in the transaction that acks its message (the worker's ack batch, or an exactly-once
queue's transaction). Only one ack of a message can commit (the lease), and a
second settle of one step matches no row, so each step's children are counted
down once, by one, whatever workers die or run a member twice. A child reaching
zero parents left is enqueued in the same commit. Each workflow's row is locked
first (in id order), then its steps in position order, so two ack transactions never
wait for each other in a circle.

What a step's message is checked for before its task runs is in
djqueue.tasks.step_checks; cancel and retry in djqueue.tasks.workflow_operations.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.dispatch import receiver
from django.utils.crypto import constant_time_compare

from djqueue import signals
from djqueue.api.queue_operations import delete
from djqueue.api.sending import send, send_batch
from djqueue.exceptions import TaskDeadLettered
from djqueue.models import (
    FailurePolicy,
    Message,
    RunIf,
    StepDependency,
    StepState,
    TaskRecord,
    TaskStatus,
    Workflow,
    WorkflowState,
    WorkflowStep,
)
from djqueue.storage import dialects, fastpath, host_clock
from djqueue.storage.statements import workflow_statements
from djqueue.storage.unreadable_rows import read_rows
from djqueue.tasks import known_tasks, workflow_edges

#: The payload key of a step's message: [workflow id, step position, workflow token,
#: 1 if the step receives results else 0].
PAYLOAD_KEY = "workflow"
#: The batch (djqueue.tasks.workflows.batch) that tasks enqueued here join, if any.
current_batch: ContextVar[Any] = ContextVar("djqueue_batch", default=None)
#: Unsaved step rows without Model.__init__'s walk of every field (see fastpath.builder).
new_step = fastpath.builder(WorkflowStep)
#: Ids per IN (...) list.
CHUNK = 500
CANCELLED_CLASS = "djqueue.exceptions.TaskCancelled"
DEAD_LETTERED_CLASS = f"{TaskDeadLettered.__module__}.{TaskDeadLettered.__qualname__}"


def new_token() -> str:
    return secrets.token_hex(16)


def step_payload(workflow: Workflow, step: WorkflowStep) -> dict[str, Any]:
    return {"task": step.task_path, "backend": step.backend, "args": step.args,
            "kwargs": step.kwargs,
            PAYLOAD_KEY: [workflow.pk, step.position, workflow.token,
                          int(step.receives is not None)]}


def send_steps(workflow: Workflow, steps: Sequence[WorkflowStep]) -> list[Message]:
    """Queue one task message per step, a multi-row insert per queue, priority and
    expiry (the step's task's ``expires``, counted from now: the step's run is due)."""
    by_queue: dict[tuple[str, int, float | None], list[WorkflowStep]] = defaultdict(list)
    for step in steps:
        by_queue[step.queue_name, step.priority,
                 known_tasks.expires_of(step.task_path)].append(step)
    sent = []
    for (queue, priority, expires), group in by_queue.items():
        messages = send_batch(queue, [step_payload(workflow, s) for s in group],
                              priority=priority, expires=expires)
        for step, message in zip(group, messages, strict=True):
            step.message_id = message.pk
        sent += messages
    return sent


def send_step(workflow: Workflow, step: WorkflowStep) -> Message:
    message = send(step.queue_name, step_payload(workflow, step), priority=step.priority,
                   expires=known_tasks.expires_of(step.task_path))
    assert isinstance(message, Message)  # sent with no dedup key: always a new message
    step.message_id = message.pk
    return message


# Settling

@dataclass
class Settled:
    """One finished run of a step, as the task's record tells it."""

    message_id: int
    workflow_id: int
    position: int
    token: str
    state: StepState
    result: Any
    error: str
    error_class: str
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None


def settled_from(message_id: int, ref: tuple[int, int, str], record: TaskRecord) -> Settled:
    error = record.errors[-1] if record.errors and record.status == TaskStatus.FAILED else {}
    error_class = error.get("exception_class_path", "")
    state = (StepState.SUCCEEDED if record.status == TaskStatus.SUCCESSFUL
             else StepState.CANCELLED if error_class == CANCELLED_CLASS else StepState.FAILED)
    return Settled(message_id, *ref, state=state,
                   result=record.return_value if state == StepState.SUCCEEDED else None,
                   error=error.get("traceback", ""), error_class=error_class,
                   attempts=len(record.worker_ids), started_at=record.started_at,
                   finished_at=record.finished_at)


def settle(db: str, runs: Sequence[Settled]) -> None:
    """Settle finished steps and start what waited for them: inside the transaction that
    acks their messages (the caller's)."""
    by_workflow: dict[int, list[Settled]] = defaultdict(list)
    for run in runs:
        by_workflow[run.workflow_id].append(run)
    for workflow in workflow_statements.lock_workflows(db, sorted(by_workflow)):
        mine = sorted((r for r in by_workflow[workflow.pk]
                       if constant_time_compare(r.token, workflow.token)),
                      key=lambda r: r.position)
        by_position = {run.position: run for run in mine}
        # Only steps still READY settle: one UPDATE ... CASE a chunk, not one a step.
        failed = any(run.state != StepState.SUCCEEDED for run in mine)
        # A Settled has the step's attribute names for what a settle writes.
        settled = workflow_statements.settle_ready_steps(
            db, workflow.pk, list(by_position.values()),
            workflow_statements.SETTLED_FIELDS if failed
            else workflow_statements.SUCCEEDED_FIELDS)
        if settled:
            _after_settled(db, workflow, [by_position[position] for position in settled])


@receiver(signals.message_dead_lettered, dispatch_uid="djqueue.workflow_joins.dead_step")
def settle_dead_lettered_step(sender: Any, message: Message, **kwargs: Any) -> None:
    """A step's message dead-lettered before its task ended it (its queue's
    ``max_attempts`` reached first, a worker killed on every delivery, an expiry)
    settles the step FAILED, in the dead-lettering's transaction, as the message's
    lease allows only one end: its workflow goes on by its failure policy instead of
    staying RUNNING. A message that names no step of a workflow is left alone."""
    ref = _step_ref(message)
    if ref is None:
        return
    db = fastpath.database_of(message) or dialects.alias()
    settle(db, [Settled(
        message.pk, *ref, state=StepState.FAILED, result=None,
        error=str(TaskDeadLettered.of_message(message.pk, message.attempts, message.errors)),
        error_class=DEAD_LETTERED_CLASS, attempts=message.attempts,
        started_at=message.claimed_at, finished_at=host_clock.database_now(db))])


def _step_ref(message: Message) -> tuple[int, int, str] | None:
    """(workflow id, position, token) of a step's message, or None."""
    if message.stored_body_id is not None or not message.body.startswith("{"):
        return None
    try:
        ref = message.payload.get(PAYLOAD_KEY)
    except (ValueError, AttributeError):
        return None
    if not (isinstance(ref, list) and len(ref) == 4 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in ref[:2])
            and isinstance(ref[2], str)):
        return None
    return ref[0], ref[1], ref[2]


def _after_settled(db: str, workflow: Workflow, done: list[Settled]) -> None:
    workflow.steps_left -= len(done)
    failures = [run for run in done if run.state == StepState.FAILED]
    workflow.failed += len(failures)
    if failures and workflow.policy == FailurePolicy.STOP and (
            workflow.state == WorkflowState.RUNNING):
        workflow.state = WorkflowState.FAILED
        # A traceback's last line names the exception and says what went wrong.
        workflow.error = _last_line(failures[0].error) or failures[0].error_class
        workflow.steps_left -= cancel_unstarted(db, workflow)
    if workflow.state == WorkflowState.RUNNING:
        start_children(db, workflow, [run.position for run in done])
    save_workflow(db, workflow)


def start_children(db: str, workflow: Workflow, parents: list[int]) -> None:
    """Count the children of the steps at ``parents`` down; enqueue those with no parent
    left (or skip them, when their condition does not hold, and go on with theirs)."""
    while parents:
        counts = workflow_edges.children(db, workflow.pk, workflow.token, parents)
        if not counts:
            return
        now_free: list[int] = []
        for chunk in chunks(sorted(counts)):
            now_free += workflow_statements.count_down(
                db, workflow.pk, {child: counts[child] for child in chunk})
        ready: list[WorkflowStep] = []
        for chunk in chunks(now_free):
            ready += read_rows(WorkflowStep.objects.using(db).filter(
                workflow_id=workflow.pk, position__in=chunk).order_by("position"))
        parents = start(db, workflow, ready)


def start(db: str, workflow: Workflow, steps: list[WorkflowStep]) -> list[int]:
    """Enqueue ``steps`` (every parent settled), or skip those whose condition fails;
    returns the skipped ones' positions (their children are counted down next)."""
    run: list[WorkflowStep] = []
    skip: list[WorkflowStep] = []
    for step in steps:
        if step.run_if == RunIf.ALWAYS:
            run.append(step)
            continue
        parents = StepDependency.objects.using(db).filter(
            workflow_id=workflow.pk, child=step.position).values_list("parent", flat=True)
        failed = WorkflowStep.objects.using(db).filter(
            workflow_id=workflow.pk, position__in=list(parents),
            state=StepState.FAILED).exists()
        (run if failed == (step.run_if == RunIf.ANY_FAILED) else skip).append(step)
    now = host_clock.database_now(db)
    for chunk in chunks([s.pk for s in skip]):
        WorkflowStep.objects.using(db).filter(pk__in=chunk).update(
            state=StepState.SKIPPED, finished_at=now)
    workflow.steps_left -= len(skip)
    if run:
        send_steps(workflow, run)  # sets their message ids
        for step in run:
            step.state = StepState.READY
        workflow_statements.update_steps(db, run, workflow_statements.STARTED_FIELDS)
    return [s.position for s in skip]


def cancel_unstarted(db: str, workflow: Workflow) -> int:
    """Cancel the steps that have not started: those waiting for parents, and queued
    ones whose message no worker holds yet (withdrawn from their queue). A queued step
    a worker has just taken settles as cancelled before its task starts (before_run).
    Returns how many were cancelled."""
    now = host_clock.database_now(db)
    cancelled = WorkflowStep.objects.using(db).filter(
        workflow_id=workflow.pk, state=StepState.WAITING).update(
        state=StepState.CANCELLED, finished_at=now)
    queued = WorkflowStep.objects.using(db).filter(
        workflow_id=workflow.pk, state=StepState.READY, message_id__isnull=False)
    withdrawn = [pk for pk, message_id in queued.values_list("pk", "message_id")
                 if message_id is not None and delete(message_id, only_unclaimed=True)]
    for chunk in chunks(withdrawn):
        cancelled += WorkflowStep.objects.using(db).filter(
            pk__in=chunk, state=StepState.READY).update(
            state=StepState.CANCELLED, finished_at=now)
    return cancelled


def save_workflow(db: str, workflow: Workflow, *, reopened: bool = False) -> None:
    """Write the workflow's counters, and end it when no step is left. ``finished_at`` is
    written only when it ends here, or is ``reopened`` (a retry)."""
    fields = ["state", "steps_total", "steps_left", "failed", "error"]
    if reopened:
        fields.append("finished_at")
    elif workflow.steps_left <= 0 and workflow.finished_at is None:
        workflow.steps_left = 0
        if workflow.state == WorkflowState.RUNNING:
            workflow.state = WorkflowState.SUCCEEDED if not workflow.failed else (
                WorkflowState.FAILED)
            if workflow.failed and not workflow.error:
                workflow.error = f"{workflow.failed} step(s) failed"
        workflow.finished_at = host_clock.database_now(db)
        fields.append("finished_at")
    workflow.steps_left = max(0, workflow.steps_left)
    workflow_statements.save_counters(db, workflow, fields)


def chunks(ids: Sequence[int]) -> list[Sequence[int]]:
    return [ids[i:i + CHUNK] for i in range(0, len(ids), CHUNK)]


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1][:500]
