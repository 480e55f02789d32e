"""Workflows in the admin: a list with filters by state and age, and each workflow as a
picture (djqueue.admin.workflow_graph) with its steps, and retry and cancel buttons
that check their permissions on the server."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from djqueue.admin import permissions
from djqueue.admin.browser import AgeFilter
from djqueue.admin.records import ReadOnlyAdmin
from djqueue.admin.workflow_graph import StepView, draw
from djqueue.exceptions import WorkflowBusy
from djqueue.models import (
    Message,
    State,
    StepDependency,
    StepState,
    Workflow,
    WorkflowState,
    WorkflowStep,
)
from djqueue.storage.unreadable_rows import values_of
from djqueue.tasks.workflow_handles import get_workflow

#: Steps listed in the table under the picture (the picture counts all of them).
MOST_LISTED = 200


class CreatedAgeFilter(AgeFilter):
    field = "created_at"


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdmin):
    list_display = ["id", "name", "state", "policy", "steps_total", "steps_left", "failed",
                    "created_at", "finished_at"]
    list_filter = ["state", CreatedAgeFilter]
    search_fields = ["=id", "name"]
    ordering = ["-id"]
    change_form_template = "admin/djqueue/workflow_change_form.html"
    fieldsets = [
        (None, {"fields": ["id", "name", "state", "policy", "steps_total", "steps_left",
                           "failed", "error", "created_at", "finished_at"]}),
        ("Steps", {"fields": ["graph_view", "steps_view"]}),
    ]
    readonly_fields = ["graph_view", "steps_view"]

    @admin.display(description="graph")
    def graph_view(self, workflow: Workflow) -> str:
        steps, edges = _steps(workflow)
        return draw(steps, edges)

    @admin.display(description="steps")
    def steps_view(self, workflow: Workflow) -> str:
        steps, _ = _steps(workflow)
        rows = format_html_join("", "<tr data-state='{}'><td>{}</td><td>{}</td><td>{}</td>"
                                "<td>{}</td><td>{}</td></tr>", (
            (s.state, s.position, s.name, s.state, s.attempts, s.duration)
            for s in steps[:MOST_LISTED]))
        more = len(steps) - MOST_LISTED
        return format_html(
            "<table class='djqueue-workflow-steps'><tr><th>#</th><th>step</th><th>state</th>"
            "<th>attempts</th><th>took</th></tr>{}</table>{}", rows,
            f"and {more} more" if more > 0 else "")

    def get_urls(self) -> list[URLPattern]:
        return [
            path("<int:workflow_id>/retry/", self.admin_site.admin_view(self.retry_view),
                 name="djqueue_workflow_retry"),
            path("<int:workflow_id>/cancel/", self.admin_site.admin_view(self.cancel_view),
                 name="djqueue_workflow_cancel"),
            *super().get_urls(),
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        workflow = self.get_object(request, object_id)
        ended = workflow is not None and workflow.state in (
            WorkflowState.FAILED, WorkflowState.CANCELLED) and not workflow.steps_left
        running = workflow is not None and workflow.state == WorkflowState.RUNNING
        context = {**(extra_context or {}), "workflow": workflow,
                   "can_retry_workflow": ended and request.user.has_perm(
                       permissions.RETRY_WORKFLOW),
                   "can_cancel_workflow": running and request.user.has_perm(
                       permissions.CANCEL_WORKFLOW)}
        return super().change_view(request, object_id, form_url, context)

    def retry_view(self, request: HttpRequest, workflow_id: int) -> HttpResponse:
        return self._operate(request, workflow_id, permissions.RETRY_WORKFLOW, _retry)

    def cancel_view(self, request: HttpRequest, workflow_id: int) -> HttpResponse:
        return self._operate(request, workflow_id, permissions.CANCEL_WORKFLOW, _cancel)

    def _operate(self, request: HttpRequest, workflow_id: int, permission: str,
                 operation: Any) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        permissions.require(request, permission)
        get_object_or_404(Workflow, pk=workflow_id)
        try:
            self.message_user(request, operation(workflow_id), messages.SUCCESS)
        except WorkflowBusy as exc:
            self.message_user(request, str(exc), messages.ERROR)
        return HttpResponseRedirect(reverse("admin:djqueue_workflow_change", args=[workflow_id]))


def _retry(workflow_id: int) -> str:
    count = get_workflow(workflow_id).retry()
    return f"Retrying workflow {workflow_id}: {count} step(s) will run again."


def _cancel(workflow_id: int) -> str:
    if get_workflow(workflow_id).cancel():
        return f"Cancelled workflow {workflow_id}: steps that have not started never will."
    return f"Workflow {workflow_id} had already ended."


def _steps(workflow: Workflow) -> tuple[list[StepView], list[tuple[int, int]]]:
    """The workflow's steps and edges, read once a page (the graph and the table both
    show them)."""
    cached = getattr(workflow, "_djqueue_steps", None)
    if cached is None:
        cached = _read_steps(workflow)
        setattr(workflow, "_djqueue_steps", cached)  # noqa: B010  (not a model field)
    return cached


def _read_steps(workflow: Workflow) -> tuple[list[StepView], list[tuple[int, int]]]:
    rows = values_of(WorkflowStep.objects.filter(workflow_id=workflow.pk).order_by("position"),
                     ("position", "name", "state", "attempts", "started_at", "finished_at",
                      "message_id"))
    queued = [r[6] for r in rows if r[2] == StepState.READY and r[6] is not None]
    running = set(Message.objects.filter(pk__in=queued[:5000], state=State.CLAIMED)
                  .values_list("pk", flat=True)) if queued else set()
    steps = [StepView(position, name, "running" if message_id in running
                      else StepState(state).label, attempts, started, finished)
             for position, name, state, attempts, started, finished, message_id in rows]
    edges = list(StepDependency.objects.filter(workflow_id=workflow.pk)
                 .values_list("parent", "child"))
    return steps, edges
