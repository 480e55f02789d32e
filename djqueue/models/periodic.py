"""Periodic tasks' records: the schedules kept in the database (edited in the admin)
and one row per scheduled minute run (the unique pair makes one scheduler win)."""

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from djqueue.conf import get_settings
from djqueue.cron import Cron, parse_time_zone
from djqueue.exceptions import ConfigurationError
from djqueue.models.shown_times import shown_time


class PeriodicSchedule(models.Model):
    """A periodic django.task kept in the database: what ``DJQUEUE["PERIODIC"]`` says in
    the settings, editable while the site runs (django-celery-beat's periodic tasks,
    Oban's dynamic cron). The reaper reads the enabled ones each minute; the task is
    looked up among the tasks defined for a djqueue backend, never imported by name.

    :meth:`clean` checks what the row alone can say (the admin's form, and any code that
    calls ``full_clean()`` as Django's model validation asks, gets these errors): the
    cron parses and runs some day, the zone is an IANA name, the arguments are a JSON
    list and object with finite numbers, and the settings have no entry of that name.
    Whether the task is defined and takes those arguments is the admin form's check
    (the tasks sit layers above the models). A row saved without either is logged and
    skipped by the reaper, and listed with why by ``manage.py djqueue_periodic``."""

    name = models.CharField(max_length=100, unique=True,
                            help_text="Unique among schedules, the settings' ones too.")
    task_path = models.CharField("task", max_length=255,
                                 help_text="The dotted path of a task defined for a djqueue "
                                           "backend.")
    cron = models.CharField(max_length=100, help_text="Five fields: minute hour "
                            "day-of-month month day-of-week, e.g. 30 2 * * 1-5.")
    time_zone = models.CharField(max_length=64, blank=True, default="",
                                 help_text="The clocks the cron is read on (blank: UTC).")
    args = models.JSONField(default=list, blank=True, help_text="A JSON list.")
    kwargs = models.JSONField(default=dict, blank=True, help_text="A JSON object.")
    catch_up = models.BooleanField(default=False, help_text="Run the minutes missed while "
                                   "no reaper ran (up to 60, oldest first).")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.name in get_settings().PERIODIC:
            errors["name"] = "DJQUEUE['PERIODIC'] in the settings has an entry of that name."
        cron = zone = None
        try:
            cron = Cron.parse(str(self.cron))
        except ConfigurationError as exc:
            errors["cron"] = str(exc)
        try:
            zone = parse_time_zone(self.time_zone or None, "This")
        except ConfigurationError as exc:
            errors["time_zone"] = str(exc)
        if cron is not None and zone is not None and cron.next_in(timezone.now(), zone) is None:
            errors["cron"] = "This cron never runs (a day no month has?)."
        if not isinstance(self.args, list):
            errors["args"] = "A JSON list, such as [1, \"two\"]."
        elif not _finite(self.args):
            errors["args"] = FINITE_NUMBERS
        if not isinstance(self.kwargs, dict):
            errors["kwargs"] = "A JSON object, such as {\"days\": 7}."
        elif not _finite(self.kwargs):
            errors["kwargs"] = FINITE_NUMBERS
        if errors:
            raise ValidationError(errors)


FINITE_NUMBERS = "Numbers must be finite: JSON has no Infinity or NaN."


def _finite(value: Any) -> bool:
    """Whether JSON carries ``value`` as it is: the databases refuse Infinity and NaN,
    which Python's JSON reader lets through (the save would fail)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


class PeriodicTick(models.Model):
    name = models.CharField(max_length=100)
    tick_at = models.DateTimeField()
    task_result_id = models.CharField(max_length=36, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "tick_at"],
                                               name="djqueue_periodic_tick_once")]

    def __str__(self) -> str:
        return f"{self.name} @ {shown_time(self.tick_at)}"
