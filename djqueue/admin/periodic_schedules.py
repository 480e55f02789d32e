"""Periodic schedules kept in the database: added, changed, paused and run at once from
the admin (django-celery-beat's periodic tasks; Oban's dynamic cron).

The form offers the tasks defined for a djqueue backend, no other path; it checks the
arguments against the task's signature, and the model's ``clean`` checks the cron, the
time zone and the arguments' JSON, so a schedule that saves is one the reaper can run.
Each row shows its last run (from the ticks) and its next (from its cron; "never" with
why, for a row the reaper would skip). The rows live on the home database, with the
ticks.
"""

from __future__ import annotations

import functools
import inspect
from datetime import datetime
from typing import Any, cast
from zoneinfo import available_timezones

from django import forms
from django.contrib import admin, messages
from django.db import DatabaseError
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from djqueue.admin.row_reading import RowReadingAdmin
from djqueue.exceptions import ConfigurationError, UntrustedTask
from djqueue.maintenance.periodic import Schedule
from djqueue.maintenance.periodic_listing import last_run
from djqueue.models import PeriodicSchedule, PeriodicTick
from djqueue.storage.unreadable_rows import read_rows
from djqueue.tasks import known_tasks

#: How many next runs a schedule's page shows.
UPCOMING_SHOWN = 5


class PeriodicScheduleForm(forms.ModelForm):
    task_path = forms.ChoiceField(label="Task", help_text="A task defined for a djqueue "
                                  "backend (an installed app's tasks module, or a backend's "
                                  "OPTIONS['TASK_MODULES']).")
    time_zone = forms.ChoiceField(required=False, help_text="The clocks the cron is read on.")

    class Meta:
        model = PeriodicSchedule
        fields = ["name", "task_path", "cron", "time_zone", "args", "kwargs", "catch_up",
                  "enabled"]
        widgets = {"args": forms.Textarea(attrs={"rows": 2, "cols": 60}),
                   "kwargs": forms.Textarea(attrs={"rows": 2, "cols": 60})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        paths = known_tasks.paths()
        current = self.instance.task_path
        if current and current not in paths:  # shown as it is; refused until changed
            paths = [current, *paths]
        cast(forms.ChoiceField, self.fields["task_path"]).choices = [
            (path, path) for path in paths]
        cast(forms.ChoiceField, self.fields["time_zone"]).choices = _time_zone_choices()

    def clean_task_path(self) -> str:
        path = self.cleaned_data["task_path"]
        try:
            known_tasks.find(path)
        except UntrustedTask as exc:
            raise forms.ValidationError(str(exc)) from None
        return path

    def clean_args(self) -> Any:
        return [] if self.cleaned_data["args"] is None else self.cleaned_data["args"]

    def clean_kwargs(self) -> Any:
        return {} if self.cleaned_data["kwargs"] is None else self.cleaned_data["kwargs"]

    def clean(self) -> dict[str, Any]:
        """The arguments must fit the task's parameters, so that a mistake shows here and
        not as a run that fails every night. The row's own checks (the cron runs some
        day, the zone, the arguments' JSON, the settings' names) are the model's
        ``clean``, which the form runs next."""
        super().clean()
        data = self.cleaned_data
        path, args, kwargs = (data.get(key) for key in ("task_path", "args", "kwargs"))
        if path is None or not isinstance(args, list) or not isinstance(kwargs, dict):
            return data
        task = known_tasks.find(path)
        leading = [None] if task.takes_context else []
        try:
            inspect.signature(task.func).bind(*leading, *args, **kwargs)
        except TypeError as exc:
            raise forms.ValidationError(f"The arguments do not fit {path}: {exc}.") from None
        return data


@functools.cache
def _time_zone_choices() -> list[tuple[str, str]]:
    """Every zone's name, read once (the first read walks the zone files: ~90 ms here)."""
    return [("", "UTC"), *((name, name) for name in sorted(available_timezones()))]


def _plan(schedule: PeriodicSchedule) -> Schedule | str:
    """The schedule the reaper runs for ``schedule``, or why it runs none ("paused",
    "never: ...")."""
    if not schedule.enabled:
        return "paused"
    try:
        plan = Schedule.from_row(schedule)
        known_tasks.find(schedule.task_path)
    except ConfigurationError as exc:
        return f"never: {exc}"
    except UntrustedTask:
        return f"never: {schedule.task_path} is no longer a defined task"
    return plan


@admin.register(PeriodicSchedule)
class PeriodicScheduleAdmin(RowReadingAdmin):
    form = PeriodicScheduleForm
    list_display = ["name", "task_path", "cron", "time_zone_shown", "enabled", "last_run",
                    "next_run"]
    list_filter = ["enabled"]
    search_fields = ["name", "task_path"]
    actions = ["run_now", "enable", "disable"]

    def get_readonly_fields(self, request: HttpRequest,
                            obj: PeriodicSchedule | None = None) -> list[str]:
        return ["upcoming_runs"] if obj is not None else []

    def get_queryset(self, request: HttpRequest) -> QuerySet[PeriodicSchedule]:
        last = (PeriodicTick.objects.filter(name=OuterRef("name")).values("name")
                .annotate(last=last_run()).values("last"))
        return super().get_queryset(request).annotate(last_tick=Subquery(last))

    @admin.display(description="time zone", ordering="time_zone")
    def time_zone_shown(self, schedule: PeriodicSchedule) -> str:
        return schedule.time_zone or "UTC"

    @admin.display(description="last run", ordering="last_tick")
    def last_run(self, schedule: PeriodicSchedule) -> datetime | None:
        return getattr(schedule, "last_tick", None)

    @admin.display(description="next run")
    def next_run(self, schedule: PeriodicSchedule) -> datetime | str:
        plan = _plan(schedule)
        if isinstance(plan, str):
            return plan
        return plan.next_run(timezone.now()) or "never"

    @admin.display(description="next runs")
    def upcoming_runs(self, schedule: PeriodicSchedule) -> str:
        """The saved schedule's next runs, on its zone's clocks and in UTC: where the
        clocks change, what the cron's rules make of them shows here."""
        plan = _plan(schedule)
        if isinstance(plan, str):
            return plan
        runs: list[datetime] = []
        after = timezone.now()
        while len(runs) < UPCOMING_SHOWN and (later := plan.next_run(after)) is not None:
            runs.append(later)
            after = later
        if not runs:
            return "never"
        return format_html_join(mark_safe("<br>"), "{} ({} UTC)", (
            (run.astimezone(plan.time_zone).strftime("%a %d %b %Y %H:%M %Z"),
             run.strftime("%H:%M")) for run in runs))

    @admin.action(description="Run the selected schedules' tasks now",
                  permissions=["change"])
    def run_now(self, request: HttpRequest, selected: QuerySet[PeriodicSchedule]) -> None:
        for row in read_rows(selected):  # a time a hand edit left unreadable: read past
            try:
                result = Schedule.from_row(row).task().enqueue(*row.args, **row.kwargs)
            except DatabaseError:
                raise
            except Exception as exc:  # the task is gone, or refuses the arguments: said
                self.message_user(request, f"{row.name}: not enqueued: {exc}", messages.ERROR)
                continue
            self.message_user(request, f"{row.name}: enqueued {row.task_path} (result "
                              f"{result.id}).", messages.SUCCESS)

    @admin.action(description="Enable the selected schedules", permissions=["change"])
    def enable(self, request: HttpRequest, selected: QuerySet[PeriodicSchedule]) -> None:
        count = selected.update(enabled=True, updated_at=timezone.now())
        self.message_user(request, f"Enabled {count} schedule(s).", messages.SUCCESS)

    @admin.action(description="Pause the selected schedules", permissions=["change"])
    def disable(self, request: HttpRequest, selected: QuerySet[PeriodicSchedule]) -> None:
        count = selected.update(enabled=False, updated_at=timezone.now())
        self.message_user(request, f"Paused {count} schedule(s).", messages.SUCCESS)
