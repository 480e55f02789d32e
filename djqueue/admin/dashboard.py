"""The dashboard page (linked from the admin index) and its per-queue buttons."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from djqueue.admin import permissions
from djqueue.admin.confirm import ask, confirmed
from djqueue.admin.databases import database_query, request_database
from djqueue.admin.operations import QUEUE_OPERATIONS
from djqueue.models import Dashboard
from djqueue.models.names import is_valid_name
from djqueue.monitoring import charts, partition_summaries, snapshot
from djqueue.storage import dialects, placement, queue_lookup

REFRESH_CHOICES = (0, 5, 30)
#: Seconds between two refreshes of the charts, in place (no page reload).
CHART_REFRESH = 5


@admin.register(Dashboard)
class DashboardAdmin(admin.ModelAdmin):
    """No list, no forms: the changelist URL is the dashboard, so the index links to it."""

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return request.user.has_perm(permissions.VIEW_DASHBOARD)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("", view(self.dashboard_view), name="djqueue_dashboard_changelist"),
            path("queue/<int:queue_id>/<str:operation>/", view(self.operation_view),
                 name="djqueue_dashboard_operation"),
        ]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """The dashboard of one database (see djqueue.admin.databases): its queues,
        workers, limits, groups, topics and alarms."""
        permissions.require(request, permissions.VIEW_DASHBOARD)
        db = request_database(request)
        read = placement.read_database(db)  # a read replica, when there is one
        with dialects.using(read):
            return self._dashboard(request, db, read)

    def _dashboard(self, request: HttpRequest, db: str, read: str) -> HttpResponse:
        # Queue rows as a queue's work reads them: a creation time no driver reads back
        # (a hand edit) fails no page (djqueue.storage.unreadable_rows).
        name = request.GET.get("queue") or ""
        queue = queue_lookup.working_rows(read).filter(name=name).first() if (
            is_valid_name(name)) else None
        if request.GET.get("part") == "charts":  # the charts alone, for the page's script
            return TemplateResponse(request, "admin/djqueue/dashboard_charts.html",
                                    {"charts": charts.load(queue)}).render()
        try:
            refresh = int(request.GET.get("refresh", 0))
        except ValueError:
            refresh = 0
        user = request.user
        data = snapshot.load()
        return TemplateResponse(request, "admin/djqueue/dashboard.html", {
            **self.admin_site.each_context(request),
            "title": "Queue dashboard",
            "data": data,
            "charts": charts.load(queue),
            "chart_refresh": CHART_REFRESH,
            "refresh": refresh if refresh in REFRESH_CHOICES else 0,
            "refresh_choices": REFRESH_CHOICES,
            "can": {name: user.has_perm(op.permission) for name, op in QUEUE_OPERATIONS.items()},
            "database": db, "databases": placement.databases(),
            "database_query": database_query(request),
            "database_first": database_query(request, True),
            "replica": _replica(read) if read != db else None,
            "partitioned": partition_summaries.load([row.queue for row in data.queues])
            if db == placement.home() else [],
        }).render()

    def operation_view(self, request: HttpRequest, queue_id: int, operation: str) -> HttpResponse:
        op = QUEUE_OPERATIONS.get(operation)
        if op is None:
            raise Http404(f"No queue operation {operation!r}.")
        permissions.require(request, op.permission)
        queue = get_object_or_404(queue_lookup.working_rows(request_database(request)),
                                  pk=queue_id)
        back = reverse("admin:djqueue_dashboard_changelist") + database_query(request, True)
        if op.question and not confirmed(request):
            return ask(request, self.admin_site, title=f"{op.label} {queue.name}?",
                       question=op.question, objects=[queue],
                       confirm_label=f"Yes, {op.label.lower()}", cancel_url=back)
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        messages.success(request, op(queue))
        return redirect(back)


def _replica(alias: str) -> dict[str, object]:
    """The read replica the page was read from, and how far behind its primary it is."""
    try:
        lag = placement.replica_lag(alias)
    except DatabaseError:
        lag = None
    return {"alias": alias, "lag": lag}
