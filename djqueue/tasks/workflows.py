"""Workflows on django.tasks: enqueueing a canvas in one transaction, and batches.

    handle = djqueue.chord([djqueue.step(add, i, i) for i in range(1000)],
                           djqueue.step(total)).enqueue()
    handle.refresh().status      # "RUNNING", then "SUCCEEDED"
    handle.result                # the callback's return value

Steps are django.tasks tasks of a djqueue backend. The join is in
djqueue.tasks.workflow_joins; composition in djqueue.tasks.workflow_canvas; the handle
that reads, waits for, cancels and retries a workflow in djqueue.tasks.workflow_handles.
"""

from __future__ import annotations

import sys
from typing import Any

from django.db import transaction

from djqueue.api.message_checks import encode_payload, holds_json_nul
from djqueue.exceptions import InvalidMessage, InvalidWorkflow, shown_value
from djqueue.models import (
    FailurePolicy,
    RunIf,
    StepState,
    Workflow,
    WorkflowStep,
)
from djqueue.storage import dialects, host_clock, placement
from djqueue.storage.queue_lookup import get_queue
from djqueue.storage.statements import row_inserts, workflow_statements
from djqueue.tasks import workflow_joins
from djqueue.tasks.backend import QueueBackend
from djqueue.tasks.compat import Task, TaskResult
from djqueue.tasks.records import record_from_message, to_task_result
from djqueue.tasks.workflow_canvas import Node, Step, flatten
from djqueue.tasks.workflow_handles import WorkflowHandle

POLICIES = {"stop": FailurePolicy.STOP, "continue": FailurePolicy.CONTINUE}


def enqueue_workflow(node: Node, *, name: str = "", policy: str = "stop") -> WorkflowHandle:
    """Enqueue a canvas: its rows and its first steps' messages in one transaction (which
    commits with the caller's, inside ``transaction.atomic()``)."""
    if policy not in POLICIES:
        raise InvalidWorkflow(f"policy is 'stop' or 'continue', got {shown_value(policy)}")
    flat = flatten(node)
    checked: dict[int, QueueBackend] = {}
    rows = [_step_row(position, step, checked) for position, step in enumerate(flat.steps)]
    for position, row in enumerate(rows):
        row.parents_left = len(flat.parents[position])
        row.state = StepState.WAITING if row.parents_left else StepState.READY
    db = _steps_database(rows)
    with dialects.using(db), transaction.atomic(using=db):
        workflow = Workflow.objects.using(db).create(
            name=_name(name), policy=POLICIES[policy], token=workflow_joins.new_token(),
            steps_total=len(rows), steps_left=len(rows), created_at=host_clock.database_now(db))
        workflow_joins.send_steps(workflow, [r for r in rows if r.state == StepState.READY])
        for row in rows:
            row.workflow_id = workflow.pk
        row_inserts.insert_rows(db, rows)
        workflow_statements.insert_edges(db, workflow.pk, (
            (parent, child, order) for child, parents in flat.parents.items()
            for order, parent in enumerate(parents)))
    return WorkflowHandle(workflow)


Node.enqueuer = staticmethod(enqueue_workflow)


def _step_row(position: int, step: Step,
              checked: dict[int, QueueBackend] | None = None) -> WorkflowStep:
    """An unsaved step row, once its task, backend and arguments are checked. A task is
    checked (and its queue made sure of) once per ``checked``, which an enqueue shares
    between its steps: a chord's 10,000 members are one task."""
    task: Task = step.task
    try:  # first: arguments that cannot be sent make no queue
        body = encode_payload({"args": step.args, "kwargs": step.kwargs})
    except InvalidMessage as exc:
        raise InvalidWorkflow(f"Step {step.name!r}: arguments must be JSON-serialisable: "
                              f"{exc}") from None
    if holds_json_nul(body):
        raise InvalidWorkflow(f"Step {step.name!r}: arguments contain a NUL character "
                              "(\\x00), which its row (a JSON column) cannot store.")
    backend = None if checked is None else checked.get(id(task))
    if backend is None:
        backend = _checked_backend(step)
        if checked is not None:
            checked[id(task)] = backend
    return workflow_joins.new_step(
        position=position, name=step.name[:200], task_path=task.module_path,
        backend=backend.alias, queue_name=task.queue_name, priority=task.priority,
        args=step.args, kwargs=step.kwargs, receives=step.receives,
        failures_as=step.failures_as, gathers=step.gathers)


def _steps_database(rows: list[WorkflowStep], db: str | None = None) -> str:
    """The database of the steps' queues (``db`` if given, which they must agree with).

    Why one: a step settles in the transaction that acks its message, and that
    transaction writes the workflow's rows, so a workflow lives with its queues.
    """
    found = {name: placement.database_of(get_queue(name))
             for name in dict.fromkeys(row.queue_name for row in rows)}
    if db is not None:
        found = {"": db, **found}
    if len(set(found.values())) > 1:
        raise InvalidWorkflow(
            "A workflow's steps must run on queues of one database (a step settles in the "
            "transaction that acks it); these are on several: " + ", ".join(
                f"{name or 'the batch'}: {where}" for name, where in found.items()))
    return next(iter(found.values()), placement.home())


def _checked_backend(step: Step) -> QueueBackend:
    task: Task = step.task
    backend = task.get_backend()
    if not isinstance(backend, QueueBackend):
        raise InvalidWorkflow(f"Step {step.name!r}: its task's backend {task.backend!r} is "
                              "not a djqueue backend")
    backend.validate_task(task)
    if task.run_after is not None:
        raise InvalidWorkflow(f"Step {step.name!r}: run_after is not supported in a "
                              "workflow (a step starts when its parents have finished)")
    backend.ensure_queue(task.queue_name)
    return backend


def _name(name: str) -> str:
    """A workflow's or batch's name: text PostgreSQL can store too (no NUL)."""
    if not isinstance(name, str) or len(name) > 200 or "\x00" in name:
        raise InvalidWorkflow(f"A workflow's name is text of at most 200 characters, "
                              f"without NUL, got {shown_value(name)}.")
    return name


class batch:  # used like a function: ``with djqueue.batch(...) as handle:``
    """Solid Queue's batches: every task enqueued inside the block (any djqueue backend)
    is a member; ``on_success``, ``on_failure`` and ``on_finish`` (steps) run once, when
    the last member settles: on_success if all succeeded, on_failure if any failed,
    on_finish either way. The block is one transaction: nothing runs before it ends,
    and an exception in it leaves no row."""

    def __init__(self, *, on_success: Step | None = None, on_failure: Step | None = None,
                 on_finish: Step | None = None, name: str = "",
                 database: str | None = None) -> None:
        self.callbacks = [(s, run_if) for s, run_if in (
            (on_success, RunIf.ALL_SUCCEEDED), (on_failure, RunIf.ANY_FAILED),
            (on_finish, RunIf.ALWAYS)) if s is not None]
        for callback, _ in self.callbacks:
            if not isinstance(callback, Step):
                raise InvalidWorkflow(f"A batch's callback is a step, got {shown_value(callback)}")
        self.name = _name(name)
        if database is not None and database not in placement.databases():
            raise InvalidWorkflow(f"A batch's database is one djqueue keeps queues on "
                                  f"({', '.join(placement.databases())}), got "
                                  f"{shown_value(database)}.")
        self.members: list[WorkflowStep] = []
        self._checked: dict[int, QueueBackend] = {}
        #: Where it lives: its callbacks' queues' database, else ``database``, else the
        #: home one; every member's queue must be there too (see _steps_database).
        self._database = database

    def __enter__(self) -> WorkflowHandle:
        if workflow_joins.current_batch.get() is not None:
            raise InvalidWorkflow("Batches do not nest")
        self.db = _steps_database([_step_row(0, callback, self._checked)
                                   for callback, _ in self.callbacks], self._database)
        self._atomic = transaction.atomic(using=self.db)
        self._atomic.__enter__()
        try:
            self.workflow = Workflow.objects.using(self.db).create(
                name=self.name, policy=FailurePolicy.CONTINUE,
                token=workflow_joins.new_token(), steps_total=0, steps_left=0,
                created_at=host_clock.database_now(self.db))
        except BaseException:
            self._atomic.__exit__(*sys.exc_info())
            raise
        self._context = workflow_joins.current_batch.set(self)
        self.handle = WorkflowHandle(self.workflow)
        return self.handle

    def add(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """A member (called by QueueBackend.enqueue inside the block)."""
        row = _step_row(len(self.members), Step(task, *args, **kwargs), self._checked)
        _steps_database([row], self.db)
        row.workflow, row.state, row.parents_left = self.workflow, StepState.READY, 0
        message = workflow_joins.send_step(self.workflow, row)
        row.save(using=self.db, force_insert=True)
        self.members.append(row)
        return to_task_result(record_from_message(message), task)

    def __exit__(self, *exc_info: Any) -> None:
        workflow_joins.current_batch.reset(self._context)
        if exc_info[0] is None:
            try:
                self._seal()
            except BaseException:
                self._atomic.__exit__(*sys.exc_info())
                raise
        self._atomic.__exit__(*exc_info)

    def _seal(self) -> None:
        rows = []
        for offset, (callback, run_if) in enumerate(self.callbacks):
            row = _step_row(len(self.members) + offset, callback)
            row.workflow, row.run_if, row.gathers = self.workflow, run_if, True
            row.parents_left, row.state = len(self.members), StepState.WAITING
            rows.append(row)
        row_inserts.insert_rows(self.db, rows)
        workflow_statements.insert_edges(self.db, self.workflow.pk, (
            (member.position, row.position, order)
            for row in rows for order, member in enumerate(self.members)))
        total = len(self.members) + len(rows)
        self.workflow.steps_total = self.workflow.steps_left = total
        if not self.members:
            workflow_joins.start(self.db, self.workflow, list(WorkflowStep.objects.using(
                self.db).filter(workflow=self.workflow)))
        workflow_joins.save_workflow(self.db, self.workflow)  # ends an empty batch at once
