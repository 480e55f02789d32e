"""Records only djqueue writes: history, workers, task results, periodic ticks, trace."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import models
from django.db.models import ForeignObjectRel, Prefetch, QuerySet
from django.http import HttpRequest

from djqueue.admin import report_views
from djqueue.admin.databases import PlacedAdmin
from djqueue.admin.paging import CappedPaginator
from djqueue.models import (
    History,
    PeriodicTick,
    TaskRecord,
    TraceEvent,
    Worker,
)
from djqueue.storage.unreadable_rows import without_times


class ReadOnlyAdmin(PlacedAdmin):
    """Rows that only djqueue itself writes: viewable, deletable by permission, never
    edited; listed with a bounded count, and acted on all at once only within it, as
    their tables may hold millions of rows (djqueue.admin.paging)."""

    paginator = CappedPaginator
    show_full_result_count = False

    def get_list_select_related(self, request: HttpRequest) -> tuple[str, ...]:
        """No join in a list: the rows a list's columns name (a message's queue) are read
        by one more query per page (get_queryset). Joined, MariaDB reads the small
        table first, then sorts every matching row of the big one, bodies and all, in
        a temporary table to return a page of them; alone, the big table's page is a
        walk of its primary key backwards, whatever its size."""
        return ()

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).prefetch_related(*shown_relations(self))

    def response_action(self, request: HttpRequest, queryset: QuerySet,
                        *args: Any, **kwargs: Any) -> Any:
        """Run an action, but not on "all" of a list past the count cap: Django's actions
        read every selected row (its delete lists each on its confirmation page), which
        over millions of rows does not finish. The list offers no "Select all" then
        (``admin/djqueue/actions.html``); this refuses a request that asks anyway."""
        if (request.POST.get("select_across") == "1"
                and CappedPaginator(queryset, self.list_per_page).capped):
            self.message_user(request, f"More than {CappedPaginator.CAP} rows match: narrow "
                              "the list with its filters to act on all of them (a queue's "
                              "pending messages: purge the queue).", messages.ERROR)
            return None
        return super().response_action(request, queryset, *args, **kwargs)

    #: How many of the selected rows a delete confirmation names; it counts the rest.
    LISTED_DELETES = 100

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple:
        """What a delete would remove, for its confirmation page and its permission check.

        Django's collector names every selected row with a link, and every row that would
        go with it: for 10,000 messages a 1.5 MB page and some 0.8 s, spent again on the
        POST that deletes. A row no other row refers to takes nothing with it, so past
        LISTED_DELETES rows the page names the first ones and counts the rest."""
        if (not isinstance(objs, QuerySet) or reaches_other_rows(self.model)
                or (count := objs.count()) <= self.LISTED_DELETES):
            return super().get_deleted_objects(objs, request)
        named, model_count, perms_needed, protected = super().get_deleted_objects(
            list(objs[:self.LISTED_DELETES]), request)
        plural = self.model._meta.verbose_name_plural
        named.append(f"and {count - self.LISTED_DELETES} more {plural}")
        return named, {**model_count, plural: count}, perms_needed, protected

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


def shown_relations(model_admin: admin.ModelAdmin) -> list[Prefetch]:
    """The rows ``model_admin``'s list shows by name: its foreign-key columns, and those
    its ``list_select_related`` names (a consumer group's topic, in the group's name).
    Read without their times: a queue whose creation time a hand edit left unreadable
    failed every message and history list (SQLite, PostgreSQL)."""
    names = [name for name in model_admin.list_display if isinstance(name, str)]
    if isinstance(model_admin.list_select_related, list | tuple):
        names += model_admin.list_select_related
    return [Prefetch(field.name, queryset=without_times(
                field.related_model._default_manager.all()))
            for field in model_admin.model._meta.get_fields()
            if field.name in names and isinstance(field, models.ForeignKey)]


def reaches_other_rows(model: type[models.Model]) -> bool:
    """Whether a delete of ``model``'s rows can reach rows of another model (a reverse
    relation that cascades, protects or sets a value), as Django's collector follows."""
    return any(isinstance(field, ForeignObjectRel) and (field.one_to_many or field.one_to_one)
               and field.on_delete is not models.DO_NOTHING
               for field in model._meta.get_fields(include_hidden=True))


@admin.register(History)
class HistoryAdmin(report_views.MessageReportFields, ReadOnlyAdmin):
    list_display = ["id", "queue", "outcome", "attempts", "worker", "sent_at", "finished_at"]
    list_filter = ["outcome"]
    fieldsets = [
        (None, {"fields": ["id", "queue", "outcome", "priority", "group_key", "attempts",
                           "size", "worker", "sent_at", "claimed_at", "finished_at"]}),
        ("Progress", {"fields": ["progress_view"]}),
        ("Logs", {"fields": ["logs_view"]}),
        ("Trace", {"fields": ["trace_view"]}),
    ]
    readonly_fields = ["progress_view", "logs_view", "trace_view"]


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "hostname", "pid", "concurrency", "started_at",
                    "heartbeat_at"]
    list_filter = ["kind"]


@admin.register(TaskRecord)
class TaskRecordAdmin(ReadOnlyAdmin):
    list_display = ["id", "task_path", "status", "queue_name", "priority", "enqueued_at",
                    "finished_at"]
    list_filter = ["status", "queue_name"]
    search_fields = ["id", "task_path"]
    readonly_fields = ["progress_view", "logs_view"]

    @admin.display(description="progress")
    def progress_view(self, record: TaskRecord) -> str:
        return report_views.progress_html(record.message_id) if record.message_id else "-"

    @admin.display(description="log records of its runs")
    def logs_view(self, record: TaskRecord) -> str:
        return report_views.logs_html(record.message_id) if record.message_id else "-"


@admin.register(PeriodicTick)
class PeriodicTickAdmin(ReadOnlyAdmin):
    list_display = ["name", "tick_at", "task_result_id", "created_at"]
    list_filter = ["name"]


@admin.register(TraceEvent)
class TraceEventAdmin(ReadOnlyAdmin):
    list_display = ["message_id", "event", "attempt", "worker", "at", "queue"]
    list_filter = ["event"]
    search_fields = ["=message_id"]
