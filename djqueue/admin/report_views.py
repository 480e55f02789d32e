"""The parts of a message's admin page that read rows kept by message id: what its
handler reported (progress, log records) and its trace. The pending message's page
and the finished one's (history) both show them."""

from __future__ import annotations

from datetime import datetime

from django.contrib import admin
from django.db import models
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from djqueue.api.message_reports import get_logs, get_progress
from djqueue.models.shown_times import shown_iso
from djqueue.storage import trace


def progress_html(message_id: int) -> SafeString:
    progress = get_progress(message_id)
    if progress is None:
        return format_html("{}", "- (its handler reported none)")
    return format_html(
        "<div class='djqueue-progress' data-percent='{}'><progress max='100' value='{}'>"
        "</progress> <b>{}%</b> {} <small>(attempt {}, {})</small></div>",
        progress.percent, progress.percent, progress.percent, progress.note, progress.attempt,
        _when(progress.updated_at))


def logs_html(message_id: int) -> SafeString:
    records = get_logs(message_id)
    if not records:
        return format_html("{}", "- (none kept)")
    rows = format_html_join(
        "", "<tr data-log-level='{}'><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td><pre>{}</pre></td></tr>",
        ((r.level_name, _when(r.logged_at), r.attempt,
          r.level_name, r.logger, r.text) for r in records))
    return format_html("<table class='djqueue-logs'><tr><th>at</th><th>attempt</th><th>level</th>"
                       "<th>logger</th><th>message</th></tr>{}</table>", rows)


def trace_html(message_id: int) -> SafeString:
    events = trace.message_trace(message_id)
    if not events:
        return format_html("{}", "- (the queue keeps no trace)")
    rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                            ((_when(e.at), e.event,
                              e.attempt, e.worker, e.detail) for e in events))
    return format_html("<table class='djqueue-trace'><tr><th>at</th><th>event</th>"
                       "<th>attempt</th><th>worker</th><th>detail</th></tr>{}</table>", rows)


def _when(moment: datetime | None) -> str:
    """A report's time, to the millisecond; "unreadable" for one a hand edit left so."""
    return shown_iso(moment, "milliseconds", sep=" ")


class MessageReportFields:
    """The admin's read-only fields of a page whose object's pk is a message id (a
    pending message, or a finished one in history)."""

    @admin.display(description="progress")
    def progress_view(self, obj: models.Model) -> str:
        return progress_html(obj.pk)

    @admin.display(description="log records of its handler runs")
    def logs_view(self, obj: models.Model) -> str:
        return logs_html(obj.pk)

    @admin.display(description="trace")
    def trace_view(self, obj: models.Model) -> str:
        return trace_html(obj.pk)
