"""Admin for queues, messages, history and workers. Actions call the API; no logic lives here."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from djqueue import operations, queues
from djqueue.models import (
    ConsumerGroup,
    History,
    Message,
    PeriodicTick,
    Queue,
    TaskRecord,
    Topic,
    TraceEvent,
    Worker,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows that only djqueue itself writes: viewable, deletable by permission, never edited."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ["name", "paused", "visibility_timeout", "max_attempts", "dead_letter_queue",
                    "max_depth", "ordered", "trace", "exactly_once"]
    list_filter = ["paused", "ordered", "trace", "exactly_once"]
    search_fields = ["name"]
    actions = ["pause", "resume", "redrive_dead"]

    @admin.action(description="Pause selected queues", permissions=["change"])
    def pause(self, request: HttpRequest, selected: QuerySet[Queue]) -> None:
        for queue in selected:
            queues.pause(queue)
        self.message_user(request, f"Paused {len(selected)} queue(s).", messages.SUCCESS)

    @admin.action(description="Resume selected queues", permissions=["change"])
    def resume(self, request: HttpRequest, selected: QuerySet[Queue]) -> None:
        for queue in selected:
            queues.resume(queue)
        self.message_user(request, f"Resumed {len(selected)} queue(s).", messages.SUCCESS)

    @admin.action(description="Redrive dead messages of selected queues", permissions=["change"])
    def redrive_dead(self, request: HttpRequest, selected: QuerySet[Queue]) -> None:
        moved = sum(operations.redrive(queue) for queue in selected)
        self.message_user(request, f"Redrove {moved} message(s).", messages.SUCCESS)


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ["id", "queue", "state", "priority", "group_key", "attempts", "visible_at",
                    "owner", "sent_at"]
    list_filter = ["state", "queue"]
    search_fields = ["=id", "=group_key"]
    list_select_related = ["queue"]
    readonly_fields = [f.name for f in Message._meta.fields]
    show_full_result_count = False


@admin.register(History)
class HistoryAdmin(ReadOnlyAdmin):
    list_display = ["id", "queue", "outcome", "attempts", "worker", "sent_at", "finished_at"]
    list_filter = ["outcome"]
    show_full_result_count = False


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ["id", "hostname", "pid", "concurrency", "started_at", "heartbeat_at"]


@admin.register(TaskRecord)
class TaskRecordAdmin(ReadOnlyAdmin):
    list_display = ["id", "task_path", "status", "queue_name", "priority", "enqueued_at",
                    "finished_at"]
    list_filter = ["status", "queue_name"]
    search_fields = ["id", "task_path"]
    show_full_result_count = False


@admin.register(PeriodicTick)
class PeriodicTickAdmin(ReadOnlyAdmin):
    list_display = ["name", "tick_at", "task_result_id", "created_at"]
    list_filter = ["name"]


@admin.register(TraceEvent)
class TraceEventAdmin(ReadOnlyAdmin):
    list_display = ["message_id", "event", "attempt", "worker", "at", "queue"]
    list_filter = ["event"]
    search_fields = ["=message_id"]
    show_full_result_count = False


class ConsumerGroupInline(admin.TabularInline):
    model = ConsumerGroup
    fields = ["name", "mode", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Topic)
class TopicAdmin(ReadOnlyAdmin):
    list_display = ["name", "retention", "created_at"]
    inlines = [ConsumerGroupInline]
