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

A step's message is checked before its task runs (:func:`before_run`): the
workflow's token must match, and a step of a workflow that was cancelled or
failed meanwhile does not start; it settles as CANCELLED.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from djqueue.api.queue_operations import delete
from djqueue.api.sending import send, send_batch
from djqueue.exceptions import UntrustedTask, WorkflowBusy
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
from djqueue.storage import dialects, fastpath
from djqueue.storage.statements import workflow_statements

#: The payload key of a step's message: [workflow id, step position, workflow token,
#: 1 if the step receives results else 0].
PAYLOAD_KEY = "workflow"
#: The batch (djqueue.tasks.workflows.batch) that tasks enqueued here join, if any.
current_batch: ContextVar[Any] = ContextVar("djqueue_batch", default=None)
#: Seconds a worker trusts a running workflow's state for its steps' start (and cancel()
#: waits after its commit): see _workflow_state.
STATE_TTL = 0.05
#: Workflows whose state a process keeps at once (the dict is emptied past it).
MOST_CACHED = 10_000
#: Unsaved step rows without Model.__init__'s walk of every field (see fastpath.builder).
new_step = fastpath.builder(WorkflowStep)
#: workflow id -> (monotonic time before the read, state, token); dict operations are
#: atomic in CPython, and a lost update only costs one more read.
_states: dict[int, tuple[float, int, str]] = {}
#: Ids per IN (...) list.
CHUNK = 500
CANCELLED_CLASS = "djqueue.exceptions.TaskCancelled"



def new_token() -> str:
    return secrets.token_hex(16)


def step_payload(workflow: Workflow, step: WorkflowStep) -> dict[str, Any]:
    return {"task": step.task_path, "backend": step.backend, "args": step.args,
            "kwargs": step.kwargs,
            PAYLOAD_KEY: [workflow.pk, step.position, workflow.token,
                          int(step.receives is not None)]}


def send_steps(workflow: Workflow, steps: Sequence[WorkflowStep]) -> list[Message]:
    """Queue one task message per step, a multi-row insert per queue and priority."""
    by_queue: dict[tuple[str, int], list[WorkflowStep]] = defaultdict(list)
    for step in steps:
        by_queue[step.queue_name, step.priority].append(step)
    sent = []
    for (queue, priority), group in by_queue.items():
        messages = send_batch(queue, [step_payload(workflow, s) for s in group],
                              priority=priority)
        for step, message in zip(group, messages, strict=True):
            step.message_id = message.pk
        sent += messages
    return sent


def send_step(workflow: Workflow, step: WorkflowStep) -> Message:
    message = send(step.queue_name, step_payload(workflow, step), priority=step.priority)
    step.message_id = message.pk
    return message


# Before a step's task runs

@dataclass
class Prepared:
    """What a step's task is called with, or None for a step that must not start."""

    args: list[Any]
    kwargs: dict[str, Any]


def reference(message: Message) -> tuple[int, int, str] | None:
    """A task message's workflow reference (workflow id, step position, token), checked
    for shape (UntrustedTask if bad)."""
    ref = message.payload.get(PAYLOAD_KEY) if isinstance(message.payload, dict) else None
    if ref is None:
        return None
    if not (isinstance(ref, list) and len(ref) == 4 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in (ref[0], ref[1], ref[3]))
            and isinstance(ref[2], str)):
        raise UntrustedTask(f"Message {message.pk} has a malformed workflow reference.")
    return ref[0], ref[1], ref[2]


def before_run(db: str, message: Message, args: list[Any],
               kwargs: dict[str, Any]) -> Prepared | None:
    """Check a step's message and give its task the results it receives; None when its
    workflow no longer runs (the step settles as cancelled).

    A step that receives nothing costs one primary-key read of its workflow's row
    (its state, and the token its message must carry); only a step that receives
    reads its row and its parents' results.
    """
    ref = reference(message)
    assert ref is not None
    workflow_id, position, token = ref
    found = _workflow_state(db, workflow_id)
    if found is None or not constant_time_compare(found[1], token):
        raise UntrustedTask(f"Message {message.pk} names a workflow step that is not its own.")
    if found[0] != WorkflowState.RUNNING:
        return None
    if not message.payload[PAYLOAD_KEY][3]:  # it receives nothing
        return Prepared(args, kwargs)
    step = WorkflowStep.objects.using(db).filter(
        workflow_id=workflow_id, position=position).only(
        "receives", "failures_as", "gathers").get()
    order = list(StepDependency.objects.using(db).filter(
        workflow_id=workflow_id, child=position).order_by("position").values_list(
        "parent", flat=True))
    found = {row[0]: row[1:] for row in WorkflowStep.objects.using(db).filter(
        workflow_id=workflow_id, position__in=order).values_list(
        "position", "state", "result", "name", "error_class", "error")}
    parents = [found[p] for p in order]
    results = [result if state == StepState.SUCCEEDED else None
               for state, result, *_ in parents]
    value = results if step.gathers or len(results) != 1 else results[0]
    if step.receives:
        kwargs = {**kwargs, step.receives: value}
    else:
        args = [value, *args]
    if step.failures_as:
        kwargs = {**kwargs, step.failures_as: [
            {"position": i, "step": name, "exception_class": error_class,
             "message": (error.strip().splitlines() or [""])[-1]}
            for i, (state, _, name, error_class, error) in enumerate(parents)
            if state == StepState.FAILED]}
    return Prepared(args, kwargs)


def _workflow_state(db: str, workflow_id: int) -> tuple[int, str] | None:
    """A workflow's state and token, as read at most STATE_TTL seconds ago while it ran.

    Why a cache: a read for every step start is a round trip, and a hand-back of
    Python's lock by the thread that waited for it, on the worker's busiest path
    (it was two thirds of a chord member's run). Why it is still exact: the time
    of a read is taken before the read is sent, a RUNNING state is trusted for
    STATE_TTL from then, and cancel() returns STATE_TTL after its commit; so a
    step that starts after cancel() returned was let start by a read made after
    the cancel committed, which saw it. Any other state is read every time (a
    retried workflow runs again).
    """
    now = time.monotonic()
    cached = _states.get(workflow_id)
    if cached is not None and now - cached[0] < STATE_TTL:
        return cached[1], cached[2]
    found = workflow_statements.workflow_state(db, workflow_id)
    if found is not None and found[0] == WorkflowState.RUNNING:
        if len(_states) >= MOST_CACHED:
            _states.clear()
        _states[workflow_id] = (now, *found)
    else:
        _states.pop(workflow_id, None)
    return found


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
        runs = {run.position: run for run in mine}
        # Only steps still READY settle; locked in position order, then written in one
        # UPDATE ... CASE a chunk, not one statement a step.
        steps = []
        for chunk in _chunks(list(runs)):
            for pk, position in workflow_statements.lock_ready_steps(db, workflow.pk, chunk):
                run = runs[position]
                steps.append(new_step(
                    id=pk, position=position, state=run.state, result=run.result,
                    error=run.error, error_class=run.error_class, message_id=run.message_id,
                    attempts=run.attempts, started_at=run.started_at,
                    finished_at=run.finished_at))
        failed = any(step.state != StepState.SUCCEEDED for step in steps)
        workflow_statements.update_steps(db, steps, workflow_statements.SETTLED_FIELDS if failed
                                         else workflow_statements.SUCCEEDED_FIELDS)
        if steps:
            _after_settled(db, workflow, [runs[step.position] for step in steps])


def _after_settled(db: str, workflow: Workflow, done: list[Settled]) -> None:
    workflow.steps_left -= len(done)
    failures = [run for run in done if run.state == StepState.FAILED]
    workflow.failed += len(failures)
    if failures and workflow.policy == FailurePolicy.STOP and (
            workflow.state == WorkflowState.RUNNING):
        workflow.state = WorkflowState.FAILED
        # A traceback's last line names the exception and says what went wrong.
        workflow.error = _last_line(failures[0].error) or failures[0].error_class
        workflow.steps_left -= _cancel_waiting(db, workflow)
    if workflow.state == WorkflowState.RUNNING:
        start_children(db, workflow, [run.position for run in done])
    save_workflow(db, workflow)


def start_children(db: str, workflow: Workflow, parents: list[int]) -> None:
    """Count the children of the steps at ``parents`` down; enqueue those with no parent
    left (or skip them, when their condition does not hold, and go on with theirs)."""
    steps = WorkflowStep.objects.using(db).filter(workflow_id=workflow.pk)
    while parents:
        counts: Counter[int] = Counter()
        for chunk in _chunks(parents):
            counts.update(workflow_statements.children_of(db, workflow.pk, chunk))  # adds
        if not counts:
            return
        now_free: list[int] = []
        for chunk in _chunks(sorted(counts)):
            now_free += workflow_statements.count_down(
                db, workflow.pk, {child: counts[child] for child in chunk})
        ready: list[WorkflowStep] = []
        for chunk in _chunks(now_free):
            ready += steps.filter(position__in=chunk).order_by("position")
        parents = start(db, workflow, ready)


def start(db: str, workflow: Workflow, steps: list[WorkflowStep]) -> list[int]:
    """Enqueue ``steps`` (every parent settled), or skip those whose condition fails;
    returns the skipped ones' positions (their children are counted down next)."""
    run, skip = [], []
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
    now = timezone.now()
    for chunk in _chunks([s.pk for s in skip]):
        WorkflowStep.objects.using(db).filter(pk__in=chunk).update(
            state=StepState.SKIPPED, finished_at=now)
    workflow.steps_left -= len(skip)
    if run:
        send_steps(workflow, run)  # sets their message ids
        for step in run:
            step.state = StepState.READY
        workflow_statements.update_steps(db, run, workflow_statements.STARTED_FIELDS)
    return [s.position for s in skip]


def _cancel_waiting(db: str, workflow: Workflow) -> int:
    """Cancel the steps that have not started: those waiting for parents, and queued
    ones whose message no worker holds yet (withdrawn from their queue). A queued step
    a worker has just taken settles as cancelled before its task starts (before_run).
    Returns how many were cancelled."""
    now = timezone.now()
    cancelled = WorkflowStep.objects.using(db).filter(
        workflow_id=workflow.pk, state=StepState.WAITING).update(
        state=StepState.CANCELLED, finished_at=now)
    queued = WorkflowStep.objects.using(db).filter(
        workflow_id=workflow.pk, state=StepState.READY, message_id__isnull=False)
    withdrawn = [pk for pk, message_id in queued.values_list("pk", "message_id")
                 if delete(message_id, only_unclaimed=True)]
    for chunk in _chunks(withdrawn):
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
        workflow.finished_at = timezone.now()
        fields.append("finished_at")
    workflow.steps_left = max(0, workflow.steps_left)
    workflow_statements.save_counters(db, workflow, fields)


# Cancel and retry

def cancel(workflow_id: int) -> bool:
    """Stop a running workflow: waiting steps never start, queued ones are withdrawn (or,
    when a worker has just taken one, settle as cancelled before their task starts);
    running ones finish. Returns STATE_TTL (50 ms) after its commit, when no worker
    can start one of its steps any more. False if it had already ended."""
    db = dialects.alias()
    with transaction.atomic(using=db):
        workflow = Workflow.objects.using(db).select_for_update().get(pk=workflow_id)
        if workflow.state != WorkflowState.RUNNING:
            return False
        workflow.state = WorkflowState.CANCELLED
        workflow.error = "cancelled"
        workflow.steps_left -= _cancel_waiting(db, workflow)
        save_workflow(db, workflow)
    if not transaction.get_connection(db).in_atomic_block:
        # Workers trust a running state for STATE_TTL: once this has passed, none will
        # start a step of this workflow (see _workflow_state). Inside the caller's
        # transaction, the commit is theirs, and so is waiting after it.
        time.sleep(STATE_TTL)
    return True


def retry(workflow_id: int) -> int:
    """Run again the failed, cancelled and skipped steps and every step after them; the
    steps that succeeded keep their results. Returns how many steps will run."""
    db = dialects.alias()
    with transaction.atomic(using=db):
        workflow = Workflow.objects.using(db).select_for_update().get(pk=workflow_id)
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
            for chunk in _chunks(sorted(positions)):
                steps.filter(position__in=chunk).update(
                    state=StepState.WAITING, parents_left=count, result=None, error="",
                    error_class="", started_at=None, finished_at=None)
        workflow.state, workflow.error, workflow.failed = WorkflowState.RUNNING, "", 0
        workflow.steps_left, workflow.finished_at = len(redo), None
        first: list[WorkflowStep] = []
        for chunk in _chunks(sorted(by_count.get(0, []))):
            first += steps.filter(position__in=chunk)
        skipped = start(db, workflow, first)
        if skipped:
            start_children(db, workflow, skipped)
        save_workflow(db, workflow, reopened=workflow.steps_left > 0)
    return len(redo)


def _chunks(ids: Sequence[int]) -> list[Sequence[int]]:
    return [ids[i:i + CHUNK] for i in range(0, len(ids), CHUNK)]


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1][:500]
