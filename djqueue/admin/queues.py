"""Queues, topics and consumer groups, alarm policies: lists with permissioned actions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db import models, transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from djqueue.admin.confirm import ReplayForm, ask, confirmed
from djqueue.admin.databases import PlacedAdmin, request_database
from djqueue.admin.operations import QUEUE_OPERATIONS, QueueOperation
from djqueue.admin.permissions import OperationPermissions
from djqueue.admin.records import ReadOnlyAdmin
from djqueue.admin.row_reading import RowReadingInline
from djqueue.api import consumer_groups
from djqueue.api.queues import LIMIT_FIELDS, limits_changed
from djqueue.models import Alarm, AlarmPolicy, ConsumerGroup, Queue, QueueStat, Topic
from djqueue.storage import placement
from djqueue.storage.unreadable_rows import read_rows, without_times
from djqueue.worker import registry


def queue_action(op: QueueOperation) -> Callable[..., TemplateResponse | None]:
    """An admin action running ``op`` on each selected queue, after a confirmation
    page when the operation is destructive."""

    def action(modeladmin: admin.ModelAdmin, request: HttpRequest,
               selected: QuerySet[Queue]) -> TemplateResponse | None:
        if op.question and not confirmed(request):
            return ask(request, modeladmin.admin_site, title=f"{op.label}: are you sure?",
                       question=op.question, objects=selected, confirm_label=f"Yes, {op.label.lower()}",
                       cancel_url=reverse("admin:djqueue_queue_changelist"), action=op.name,
                       selected=selected.values_list("pk", flat=True))
        for queue in read_rows(selected):  # a time a hand edit left unreadable: read past
            modeladmin.message_user(request, op(queue), messages.SUCCESS)
        return None

    action.__name__ = op.name
    return admin.action(description=f"{op.label} selected queues",
                        permissions=[op.admin_permission])(action)


@admin.register(Queue)
class QueueAdmin(OperationPermissions, PlacedAdmin):
    list_display = ["name", "paused", "visibility_timeout", "max_attempts", "dead_letter_queue",
                    "max_depth", "ordered", "trace", "exactly_once"]
    list_filter = ["paused", "ordered", "trace", "exactly_once"]
    search_fields = ["name"]
    actions = [queue_action(op) for op in QUEUE_OPERATIONS.values()]
    fieldsets = [
        (None, {"fields": ["name", "paused", "visibility_timeout", "max_attempts", "backoff",
                           "retry_jitter", "dead_letter_queue", "retention", "message_ttl", "max_depth",
                           "max_payload_bytes"]}),
        ("Limits", {"fields": ["rate_limit", "rate_burst", "concurrency_limit",
                               "group_concurrency", "group_rate_limit", "group_rate_burst"],
                    "description": "Held across every worker, process and host; a change "
                                   "holds from the workers' next claim."}),
        ("Delivery", {"fields": ["ordered", "skip_stale", "dedup_window", "trace",
                                 "exactly_once"]}),
        ("Handler", {"fields": ["handler"],
                     "description": "What a worker started with this site's settings and "
                                    "handlers modules runs for the queue."}),
    ]
    readonly_fields = ["handler"]

    @admin.display(description="handler")
    def handler(self, queue: Queue) -> str:
        return registry.describe(queue.name) if queue.name else "-"

    def save_model(self, request: HttpRequest, obj: models.Model, form: Any,
                   change: bool) -> None:
        """Save, and apply changed limits as :func:`djqueue.set_limits` does. A new queue
        goes where a QUEUE_DATABASES rule places it, else to the database shown."""
        assert isinstance(obj, Queue)  # this admin's model
        if not change:
            obj._state.db = placement.ruled(obj.name) or request_database(request)
        db = obj._state.db or request_database(request)
        with transaction.atomic(using=db):
            before = (Queue.objects.using(db).select_for_update().filter(pk=obj.pk)
                      .only(*LIMIT_FIELDS).first() if change else None)
            super().save_model(request, obj, form, change)
            limits_changed(db, before or Queue(), obj)


@admin.register(ConsumerGroup)
class ConsumerGroupAdmin(OperationPermissions, ReadOnlyAdmin):
    list_display = ["__str__", "mode", "created_at"]
    list_select_related = ["topic"]
    actions = ["replay"]

    @admin.action(description="Replay selected groups from a time", permissions=["replay"])
    def replay(self, request: HttpRequest,
               selected: QuerySet[ConsumerGroup]) -> TemplateResponse | None:
        form = ReplayForm(request.POST if request.POST.get("confirm") else None)
        if not confirmed(request, form):
            return ask(request, self.admin_site, title="Replay consumer groups",
                       question="Deliver again, to every consumer of these groups, the stored "
                                "messages published since:", objects=selected, form=form,
                       confirm_label="Replay",
                       cancel_url=reverse("admin:djqueue_consumergroup_changelist"),
                       action="replay", selected=selected.values_list("pk", flat=True))
        since = form.cleaned_data["since"]
        for group in without_times(selected.select_related("topic")):
            count = consumer_groups.reset_group(group.topic, group.name, to=since)
            self.message_user(request, f"{group}: {count} deliveries replayed.", messages.SUCCESS)
        return None


class ConsumerGroupInline(RowReadingInline):
    model = ConsumerGroup
    fields = readonly_fields = ("name", "mode", "created_at")
    extra = 0
    can_delete = False


@admin.register(Topic)
class TopicAdmin(ReadOnlyAdmin):
    list_display = ["name", "retention", "created_at"]
    inlines = [ConsumerGroupInline]


@admin.register(AlarmPolicy)
class AlarmPolicyAdmin(PlacedAdmin):
    list_display = ["name", "metric", "queue", "consumer_group", "threshold", "cooldown",
                    "enabled", "firing", "last_fired_at"]
    list_filter = ["metric", "enabled", "firing"]
    readonly_fields = ["firing", "last_fired_at"]


@admin.register(Alarm)
class AlarmAdmin(ReadOnlyAdmin):
    list_display = ["fired_at", "policy", "subject", "value", "threshold"]
    list_filter = ["policy"]


@admin.register(QueueStat)
class QueueStatAdmin(ReadOnlyAdmin):
    list_display = ["queue", "period", "start", "sent", "acked", "failed", "dead_lettered",
                    "wait_p95", "run_p95"]
    list_filter = ["period", "queue"]
    date_hierarchy = "start"
