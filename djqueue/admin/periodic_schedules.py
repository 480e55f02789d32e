"""Periodic schedules kept in the database: added, changed, paused and run at once from
the admin (django-celery-beat's periodic tasks; Oban's dynamic cron).

The form offers the tasks defined for a djqueue backend, no other path; it checks the
cron, the time zone, and the arguments against the task's signature, so a schedule that
saves is one the reaper can run. Each row shows its last run (from the ticks) and its
next (from its cron). The rows live on the home database, with the ticks.
"""

from __future__ import annotations

import functools
import inspect
import json
from datetime import datetime
from typing import Any
from zoneinfo import available_timezones

from django import forms
from django.contrib import admin, messages
from django.db import DatabaseError
from django.db.models import Max, OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.utils import timezone

from djqueue.conf import get_settings
from djqueue.exceptions import ConfigurationError, UntrustedTask
from djqueue.maintenance.cron import Cron
from djqueue.maintenance.periodic import NEXT_RUN_WITHIN, Schedule, parse_time_zone
from djqueue.models import PeriodicSchedule, PeriodicTick
from djqueue.storage import placement
from djqueue.tasks import known_tasks


class PeriodicScheduleForm(forms.ModelForm):
    task_path = forms.ChoiceField(label="Task", help_text="A task defined for a djqueue "
                                  "backend (an installed app's tasks module, or a backend's "
                                  "OPTIONS['TASK_MODULES']).")
    time_zone = forms.ChoiceField(required=False, help_text="The clocks the cron is read on.")

    class Meta:
        model = PeriodicSchedule
        fields = ["name", "task_path", "cron", "time_zone", "args", "kwargs", "catch_up",
                  "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        paths = known_tasks.paths()
        current = self.instance.task_path
        if current and current not in paths:  # shown as it is; refused until changed
            paths = [current, *paths]
        self.fields["task_path"].choices = [(path, path) for path in paths]
        self.fields["time_zone"].choices = _time_zone_choices()

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if name in get_settings().PERIODIC:
            raise forms.ValidationError("DJQUEUE['PERIODIC'] in the settings has an entry "
                                        "of that name.")
        return name

    def clean_task_path(self) -> str:
        path = self.cleaned_data["task_path"]
        try:
            known_tasks.find(path)
        except UntrustedTask as exc:
            raise forms.ValidationError(str(exc)) from None
        return path

    def clean_cron(self) -> str:
        try:
            return Cron.parse(self.cleaned_data["cron"]).expression
        except ConfigurationError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_time_zone(self) -> str:
        value = self.cleaned_data["time_zone"]
        try:
            parse_time_zone(value or None, "This")
        except ConfigurationError as exc:
            raise forms.ValidationError(str(exc)) from None
        return value

    def clean_args(self) -> Any:
        value = self.cleaned_data["args"]
        if value is None:
            return []
        if not isinstance(value, list):
            raise forms.ValidationError("A JSON list, such as [1, \"two\"].")
        return _strict_json(value)

    def clean_kwargs(self) -> Any:
        value = self.cleaned_data["kwargs"]
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError("A JSON object, such as {\"days\": 7}.")
        return _strict_json(value)

    def clean(self) -> dict[str, Any]:
        """The cron must run some day, and the arguments fit the task's parameters: a
        mistake shows here, not as a schedule that never runs or fails every night."""
        data = super().clean()
        cron, zone = data.get("cron"), data.get("time_zone")
        if cron is not None and zone is not None and Cron.parse(cron).next_in(
                timezone.now(), parse_time_zone(zone or None, "This"), NEXT_RUN_WITHIN) is None:
            self.add_error("cron", "This cron never runs (a day no month has?).")
        path, args, kwargs = (data.get(key) for key in ("task_path", "args", "kwargs"))
        if path is None or args is None or kwargs is None:
            return data
        task = known_tasks.find(path)
        leading = [None] if getattr(task, "takes_context", False) else []
        try:
            inspect.signature(task.func).bind(*leading, *args, **kwargs)
        except TypeError as exc:
            raise forms.ValidationError(f"The arguments do not fit {path}: {exc}.") from None
        return data


@functools.cache
def _time_zone_choices() -> list[tuple[str, str]]:
    """Every zone's name, read once (the first read walks the zone files: ~90 ms here)."""
    return [("", "UTC"), *((name, name) for name in sorted(available_timezones()))]


def _strict_json(value: Any) -> Any:
    """``value`` if JSON can carry it as it is; the databases refuse Infinity and NaN,
    which Python's JSON reader lets through."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        raise forms.ValidationError("Numbers must be finite: JSON has no Infinity or "
                                    "NaN.") from None
    return value


@admin.register(PeriodicSchedule)
class PeriodicScheduleAdmin(admin.ModelAdmin):
    form = PeriodicScheduleForm
    list_display = ["name", "task_path", "cron", "time_zone_shown", "enabled", "last_run",
                    "next_run"]
    list_filter = ["enabled"]
    search_fields = ["name", "task_path"]
    actions = ["run_now", "enable", "disable"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[PeriodicSchedule]:
        last = (PeriodicTick.objects.filter(name=OuterRef("name")).values("name")
                .annotate(last=Max("tick_at")).values("last"))
        return (super().get_queryset(request).using(placement.home())
                .annotate(last_tick=Subquery(last)))

    def save_model(self, request: HttpRequest, obj: PeriodicSchedule, form: Any,
                   change: bool) -> None:
        obj.save(using=placement.home())

    @admin.display(description="time zone", ordering="time_zone")
    def time_zone_shown(self, schedule: PeriodicSchedule) -> str:
        return schedule.time_zone or "UTC"

    @admin.display(description="last run", ordering="last_tick")
    def last_run(self, schedule: PeriodicSchedule) -> datetime | None:
        return getattr(schedule, "last_tick", None)

    @admin.display(description="next run")
    def next_run(self, schedule: PeriodicSchedule) -> datetime | str:
        if not schedule.enabled:
            return "paused"
        try:
            plan = Schedule.from_row(schedule)
        except ConfigurationError as exc:
            return f"never: {exc}"
        return plan.next_run(timezone.now()) or "never"

    @admin.action(description="Run the selected schedules' tasks now",
                  permissions=["change"])
    def run_now(self, request: HttpRequest, selected: QuerySet[PeriodicSchedule]) -> None:
        for row in selected:
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
