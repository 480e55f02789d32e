"""The message browser: filters (queue, state, group key, age, an expression), a detail
page with payload, headers, progress, errors, log records and trace, and permissioned
actions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from djqueue.admin import report_views
from djqueue.admin.confirm import VisibilityForm, ask, confirmed
from djqueue.admin.permissions import OperationPermissions
from djqueue.admin.records import ReadOnlyAdmin
from djqueue.api import queue_operations
from djqueue.api.condition_parser import checked_condition
from djqueue.exceptions import InvalidCondition
from djqueue.models import Message, State
from djqueue.storage.queue_lookup import get_queue_by_id


class TextFilter(admin.ListFilter):
    """A filter with a text box; subclasses say what the text means."""

    parameter_name = ""
    placeholder = ""
    template = "admin/djqueue/text_filter.html"

    def __init__(self, request: HttpRequest, params: dict[str, Any], model: Any,
                 model_admin: admin.ModelAdmin) -> None:
        super().__init__(request, params, model, model_admin)
        value = params.pop(self.parameter_name, None)
        self.value = (value[-1] if isinstance(value, list) else value or "").strip()

    def has_output(self) -> bool:
        return True

    def expected_parameters(self) -> list[str | None]:
        return [self.parameter_name]

    def choices(self, changelist: Any) -> Iterator[dict[str, Any]]:
        others = [(k, v) for k, v in changelist.get_filters_params().items()
                  if k != self.parameter_name]
        yield {"value": self.value, "name": self.parameter_name, "placeholder": self.placeholder,
               "others": [(k, v[-1] if isinstance(v, list) else v) for k, v in others],
               "clear_url": changelist.get_query_string(remove=[self.parameter_name])}


class GroupKeyFilter(TextFilter):
    title = "group key"
    parameter_name = "group_key"
    placeholder = "exact key"

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(group_key=self.value) if self.value else queryset


class ConditionFilter(TextFilter):
    title = "expression"
    parameter_name = "where"
    placeholder = "priority > 5 and headers.region = 'eu'"

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if not self.value:
            return queryset
        try:
            # Checked on the database first: a condition it cannot evaluate is a message
            # on the page, not a server error when the list renders.
            return queryset.filter(checked_condition(self.value, queryset.db))
        except InvalidCondition as exc:
            messages.error(request, f"Expression not applied: {exc}")
            return queryset.none()


class AgeFilter(admin.SimpleListFilter):
    title = "age"
    parameter_name = "older_than"
    #: The time the age counts from.
    field = "sent_at"
    AGES = {"60": "older than a minute", "3600": "older than an hour",
            "86400": "older than a day"}

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin,
                ) -> list[tuple[str, str]]:
        return list(self.AGES.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value is None or value not in self.AGES:
            return queryset
        since = timezone.now() - timedelta(seconds=int(value))
        return queryset.filter(**{f"{self.field}__lte": since})


def _pretty(value: Any) -> str:
    return format_html("<pre class='djqueue-json'>{}</pre>",
                       json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


@admin.register(Message)
class MessageAdmin(OperationPermissions, report_views.MessageReportFields, ReadOnlyAdmin):
    list_display = ["id", "queue", "state", "priority", "group_key", "attempts", "sent_at",
                    "visible_at", "owner", "short_error"]
    list_filter = ["queue", "state", GroupKeyFilter, AgeFilter, ConditionFilter]
    search_fields = ["=id", "=group_key"]
    ordering = ["-id"]
    actions = ["retry_now", "redrive_selected", "change_visibility", "delete_selected"]
    fieldsets = [
        (None, {"fields": ["id", "queue", "state", "priority", "group_key", "attempts",
                           "sent_at", "visible_at", "claimed_at", "owner", "origin_queue"]}),
        ("Payload", {"fields": ["payload_view", "headers_view"]}),
        ("Progress", {"fields": ["progress_view"]}),
        ("Errors", {"fields": ["errors_view"]}),
        ("Logs", {"fields": ["logs_view"]}),
        ("Trace", {"fields": ["trace_view"]}),
    ]
    readonly_fields = ["id", "queue", "state", "priority", "group_key", "attempts", "sent_at",
                       "visible_at", "claimed_at", "owner", "origin_queue", "payload_view",
                       "headers_view", "progress_view", "errors_view", "logs_view",
                       "trace_view"]

    @admin.display(description="last error")
    def short_error(self, message: Message) -> str:
        said = message.last_exception or ""
        return said if len(said) <= 80 else said[:79] + "…"

    @admin.display(description="payload")
    def payload_view(self, message: Message) -> str:
        try:
            return _pretty(message.payload)
        except ValueError:
            return format_html("<pre>{}</pre>", message.encoded_body)

    @admin.display(description="headers")
    def headers_view(self, message: Message) -> str:
        return _pretty(message.headers) if message.headers else "-"

    @admin.display(description="errors, one per failed delivery")
    def errors_view(self, message: Message) -> str:
        if not message.errors:
            return "-"
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td><pre>{}</pre></td></tr>",
                                ((e.get("attempt"), e.get("at"), e.get("worker"), e.get("error"))
                                 for e in message.errors))
        return format_html("<table class='djqueue-errors'><tr><th>attempt</th><th>at</th>"
                           "<th>worker</th><th>error</th></tr>{}</table>", rows)

    # Deleting goes through the API, so history records it and ordered groups move on.

    def delete_model(self, request: HttpRequest, obj: Message) -> None:
        queue_operations.delete(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        queue_operations.delete_batch(list(queryset.values_list("pk", flat=True)))

    @admin.action(description="Retry selected delayed messages now", permissions=["retry"])
    def retry_now(self, request: HttpRequest, selected: QuerySet[Message]) -> None:
        count = queue_operations.retry_now(list(selected.values_list("pk", flat=True)))
        self.message_user(request, f"{count} message(s) made ready now (only delayed ones can be).",
                          messages.SUCCESS)

    @admin.action(description="Redrive selected dead-lettered messages", permissions=["redrive"])
    def redrive_selected(self, request: HttpRequest, selected: QuerySet[Message]) -> None:
        moved = 0
        dead = selected.filter(state=State.DEAD).values_list("queue_id", "pk")
        by_queue: dict[int, list[int]] = {}
        for queue_id, pk in dead:
            by_queue.setdefault(queue_id, []).append(pk)
        for queue_id, ids in by_queue.items():
            moved += queue_operations.redrive(get_queue_by_id(queue_id), ids=ids)
        self.message_user(request, f"Redrove {moved} message(s).", messages.SUCCESS)

    @admin.action(description="Change visibility of selected messages",
                  permissions=["visibility"])
    def change_visibility(self, request: HttpRequest,
                          selected: QuerySet[Message]) -> TemplateResponse | None:
        form = VisibilityForm(request.POST if request.POST.get("confirm") else None)
        if not confirmed(request, form):
            return ask(request, self.admin_site, title="Change visibility",
                       question="Make these messages visible (or end their lease) in:",
                       objects=selected[:100], form=form, confirm_label="Change",
                       cancel_url=reverse("admin:djqueue_message_changelist"),
                       action="change_visibility", selected=selected.values_list("pk", flat=True))
        count = queue_operations.change_visibility(list(selected.values_list("pk", flat=True)),
                                             form.cleaned_data["seconds"])
        self.message_user(request, f"Changed the visibility of {count} message(s).",
                          messages.SUCCESS)
        return None
