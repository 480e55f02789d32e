"""Workflows: django.tasks runs joined into chains, groups, chords, DAGs and batches.

A workflow is a row with counters; its steps are rows with a count of the
parents each still waits for; its edges are rows naming parent and child. A
step's message is an ordinary task message whose payload names the workflow,
the step's position and the workflow's secret ``token`` (a message that names a
workflow without its token is refused). The join is exact because it happens
in the transaction that acks the member's message: the member's step is marked
settled only while still READY, its children's counts go down by one each, and
a child reaching zero is enqueued, all in that one commit
(djqueue.tasks.workflow_joins).
"""

from __future__ import annotations

from django.db import models


class WorkflowState(models.IntegerChoices):
    RUNNING = 1, "running"
    SUCCEEDED = 2, "succeeded"
    FAILED = 3, "failed"
    CANCELLED = 4, "cancelled"


class FailurePolicy(models.IntegerChoices):
    #: The first failure fails the workflow; no other step starts after it.
    STOP = 1, "stop"
    #: Dependants run anyway; steps that receive results get the failures.
    CONTINUE = 2, "continue"


class StepState(models.IntegerChoices):
    WAITING = 1, "waiting"  # for its parents
    READY = 2, "ready"  # its message is queued or running
    SUCCEEDED = 3, "succeeded"
    FAILED = 4, "failed"
    CANCELLED = 5, "cancelled"  # never ran: the workflow failed or was cancelled
    SKIPPED = 6, "skipped"  # a batch callback whose condition did not hold


#: The states in which a step is done with (the workflow's ``steps_left`` excludes them).
SETTLED_STATES = (StepState.SUCCEEDED, StepState.FAILED, StepState.CANCELLED,
                  StepState.SKIPPED)


class RunIf(models.IntegerChoices):
    ALWAYS = 1, "always"
    #: A batch's on_success: only when every parent succeeded.
    ALL_SUCCEEDED = 2, "all parents succeeded"
    #: A batch's on_failure: only when a parent failed.
    ANY_FAILED = 3, "a parent failed"


class Workflow(models.Model):
    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200, blank=True, default="")
    state = models.PositiveSmallIntegerField(choices=WorkflowState.choices,
                                             default=WorkflowState.RUNNING)
    policy = models.PositiveSmallIntegerField(choices=FailurePolicy.choices,
                                              default=FailurePolicy.STOP)
    #: Proves a step's message was made by djqueue for this workflow.
    token = models.CharField(max_length=32)
    steps_total = models.PositiveIntegerField()
    steps_left = models.PositiveIntegerField(help_text="Steps not yet settled.")
    failed = models.PositiveIntegerField(default=0, help_text="Steps that failed.")
    error = models.TextField(blank=True, default="",
                             help_text="The failure that stopped the workflow.")
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        permissions = [
            ("retry_workflow", "Can retry the failed steps of a workflow"),
            ("cancel_workflow", "Can cancel a workflow"),
        ]
        indexes = [models.Index(fields=["state", "created_at"], name="djqueue_wf_state")]

    def __str__(self) -> str:
        return f"workflow #{self.id} {self.name}".rstrip()


class WorkflowStep(models.Model):
    id = models.BigAutoField(primary_key=True)
    # Indexed by (workflow, position), unique, below.
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps",
                                 db_index=False)
    #: Its place in the workflow as composed (0, 1, ...): what its message names.
    position = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    task_path = models.CharField(max_length=255)
    backend = models.CharField(max_length=100)
    queue_name = models.CharField(max_length=100)
    priority = models.SmallIntegerField(default=0)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    #: None: it receives no results; "": its parents' results as the first positional
    #: argument; else the keyword argument they are passed as.
    receives = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    #: The keyword argument the parents' failures are passed as ("" for none).
    failures_as = models.CharField(max_length=100, blank=True, default="")
    #: A chord's callback: a list of results even with a single parent.
    gathers = models.BooleanField(default=False)
    run_if = models.PositiveSmallIntegerField(choices=RunIf.choices, default=RunIf.ALWAYS)
    state = models.PositiveSmallIntegerField(choices=StepState.choices)
    parents_left = models.PositiveIntegerField()
    message_id = models.BigIntegerField(null=True, blank=True,
                                        help_text="The task message of its current run.")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    error_class = models.CharField(max_length=255, blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "workflow step"
        constraints = [models.UniqueConstraint(fields=["workflow", "position"],
                                               name="djqueue_step_position")]
        indexes = [models.Index(fields=["workflow", "state"], name="djqueue_step_state")]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_state_display()})"


class StepDependency(models.Model):
    """Step ``child`` runs after step ``parent`` (both positions in ``workflow``);
    ``position`` orders the results the child receives.

    Steps are named by position, not id, so a workflow's rows are written in plain
    multi-row inserts without reading ids back, and the join finds a step by the
    (workflow, position) unique index its message names anyway.
    """

    id = models.BigAutoField(primary_key=True)
    # Indexed by (workflow, child, position) and (workflow, parent), below.
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="+",
                                 db_index=False)
    parent = models.PositiveIntegerField()
    child = models.PositiveIntegerField()
    position = models.PositiveIntegerField()

    class Meta:
        verbose_name_plural = "step dependencies"
        constraints = [models.UniqueConstraint(fields=["workflow", "child", "position"],
                                               name="djqueue_dependency_child")]
        indexes = [models.Index(fields=["workflow", "parent"], name="djqueue_dependency_parent")]

    def __str__(self) -> str:
        return f"{self.parent} -> {self.child}"
