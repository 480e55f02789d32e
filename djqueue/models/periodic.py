"""Periodic tasks' records: the schedules kept in the database (edited in the admin)
and one row per scheduled minute run (the unique pair makes one scheduler win)."""

from django.db import models


class PeriodicSchedule(models.Model):
    """A periodic django.task kept in the database: what ``DJQUEUE["PERIODIC"]`` says in
    the settings, editable while the site runs (django-celery-beat's periodic tasks,
    Oban's dynamic cron). The reaper reads the enabled ones each minute; the task is
    looked up among the tasks defined for a djqueue backend, never imported by name."""

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


class PeriodicTick(models.Model):
    name = models.CharField(max_length=100)
    tick_at = models.DateTimeField()
    task_result_id = models.CharField(max_length=36, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "tick_at"],
                                               name="djqueue_periodic_tick_once")]

    def __str__(self) -> str:
        return f"{self.name} @ {self.tick_at:%Y-%m-%d %H:%M}"
