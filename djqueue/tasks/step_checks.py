"""Before a workflow step's task runs: is its message genuine, does its workflow still
run, and which results does it receive.

A step's message names its workflow, its position and the workflow's secret
token; a message whose token does not match is refused (UntrustedTask: it is
dead-lettered, and nothing runs). A step of a workflow that was cancelled or
failed meanwhile does not start: it settles as cancelled.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.utils.crypto import constant_time_compare

from djqueue.exceptions import UntrustedTask
from djqueue.models import Message, StepDependency, StepState, WorkflowState, WorkflowStep
from djqueue.storage.statements import workflow_statements
from djqueue.tasks.workflow_joins import PAYLOAD_KEY

#: Seconds a worker trusts a running workflow's state for its steps' start (and cancel()
#: waits after its commit): see _workflow_state.
STATE_TTL = 0.05
#: Workflows whose state a process keeps at once (the dict is emptied past it).
MOST_CACHED = 10_000
#: workflow id -> (monotonic time before the read, state, token); dict operations are
#: atomic in CPython, and a lost update only costs one more read.
_states: dict[int, tuple[float, int, str]] = {}


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
    settled = {row[0]: row[1:] for row in WorkflowStep.objects.using(db).filter(
        workflow_id=workflow_id, position__in=order).values_list(
        "position", "state", "result", "name", "error_class", "error")}
    parents = [settled[p] for p in order]
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
