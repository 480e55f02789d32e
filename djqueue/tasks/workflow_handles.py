"""The handle of an enqueued workflow: it reads the workflow's status, steps, results and
errors, waits for it to finish, and cancels or retries it.

    handle = djqueue.get_workflow(order.workflow_id)
    handle.wait(timeout=30).status   # "SUCCEEDED", "FAILED" or "CANCELLED"
"""

from __future__ import annotations

from typing import Any

from djqueue.exceptions import NotFinished
from djqueue.models import StepState, Workflow, WorkflowState, WorkflowStep
from djqueue.polling import poll_until
from djqueue.storage import dialects, placement
from djqueue.storage.unreadable_rows import read_rows
from djqueue.tasks import workflow_operations

#: The longest pause, in seconds, between two reads of a workflow a wait makes.
WAIT_INTERVAL = 0.2


class WorkflowHandle:
    """A workflow as last read: its status, steps, results and errors."""

    def __init__(self, workflow: Workflow) -> None:
        self._workflow = workflow
        self._steps: list[WorkflowStep] | None = None
        #: The database it lives on: its steps' queues' (djqueue.storage.placement).
        self.database = placement.database_of(workflow)

    def __repr__(self) -> str:
        return f"<WorkflowHandle #{self.id} {self.status}>"

    @property
    def id(self) -> int:
        return self._workflow.pk

    @property
    def name(self) -> str:
        return self._workflow.name

    @property
    def status(self) -> str:
        """RUNNING, SUCCEEDED, FAILED or CANCELLED."""
        return WorkflowState(self._workflow.state).name

    @property
    def is_finished(self) -> bool:
        """Whether it has ended: its end time is written, or, where a hand edit left that
        time unreadable (read as None), no step of it is left and it no longer runs."""
        workflow = self._workflow
        return workflow.finished_at is not None or (
            workflow.steps_left == 0 and workflow.state != WorkflowState.RUNNING)

    @property
    def error(self) -> str:
        """What failed it (the first failure, under the "stop" policy)."""
        return self._workflow.error

    @property
    def steps(self) -> list[WorkflowStep]:
        """Its steps in composition order: ``name``, ``state``, ``result``, ``error``,
        ``attempts``, ``started_at``, ``finished_at`` (None where a hand edit left it
        unreadable, djqueue.storage.unreadable_rows)."""
        if self._steps is None:
            self._steps = read_rows(WorkflowStep.objects.using(self.database).filter(
                workflow_id=self.id).order_by("position"))
        return self._steps

    @property
    def results(self) -> list[Any]:
        """Each step's return value, in composition order (None until it succeeded)."""
        return [s.result if s.state == StepState.SUCCEEDED else None for s in self.steps]

    @property
    def result(self) -> Any:
        """The last step's return value (a chain's last step, a chord's callback); None
        for an empty batch."""
        results = self.results
        return results[-1] if results else None

    @property
    def errors(self) -> dict[str, str]:
        """The failed steps' tracebacks, by step name."""
        return {s.name: s.error for s in self.steps if s.state == StepState.FAILED}

    def refresh(self) -> WorkflowHandle:
        self._workflow = workflow_operations.read_workflow(self.database, self.id)
        self._steps = None
        return self

    def wait(self, timeout: float | None = None, *,
             interval: float = WAIT_INTERVAL) -> WorkflowHandle:
        """Wait until the workflow has ended (SUCCEEDED, FAILED or CANCELLED) and return
        this handle, read again: it reads the workflow's row at once, then after pauses
        that double from ``POLL_MIN`` up to ``interval`` seconds. NotFinished after
        ``timeout`` seconds (None: no end); the workflow goes on."""
        if not poll_until(lambda: self.refresh().is_finished, timeout, interval):
            raise NotFinished(f"Workflow {self.id} had not finished after {timeout:g} s "
                              f"(it is {self.status}; {self._workflow.steps_left} of its "
                              f"{self._workflow.steps_total} steps not yet settled).")
        return self

    def cancel(self) -> bool:
        """Steps that have not started never will; False if it had already ended."""
        with dialects.using(self.database):
            cancelled = workflow_operations.cancel(self.id)
        self.refresh()
        return cancelled

    def retry(self) -> int:
        """Run the failed (and cancelled, skipped) steps again, then their dependants;
        returns how many steps will run. WorkflowBusy while steps still run."""
        with dialects.using(self.database):
            count = workflow_operations.retry(self.id)
        self.refresh()
        return count


def get_workflow(workflow_id: int, *, database: str | None = None) -> WorkflowHandle:
    """Workflow ``workflow_id`` of ``database`` (ids are per database; default: the home
    one, where workflows whose queues are not placed elsewhere live)."""
    return WorkflowHandle(workflow_operations.read_workflow(database or placement.home(),
                                                            workflow_id))
