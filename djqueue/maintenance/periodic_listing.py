"""Every periodic schedule, the settings' and the stored ones, with its last and next
runs: what ``manage.py djqueue_periodic`` prints (the admin lists the stored ones only,
as rows it can edit; the settings' ones are code, and shown here).

A stored row that the reaper skips (a wrong cron or time zone, a name the settings
use) is listed with why, as the reaper's log says it; whether its task is still
defined is the reaper's to find at its run (this layer does not know the tasks).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Max

from djqueue.exceptions import ConfigurationError
from djqueue.maintenance.periodic import Schedule, schedules
from djqueue.models import PeriodicSchedule, PeriodicTick
from djqueue.models.shown_times import iso_or_null
from djqueue.storage import dialects, host_clock
from djqueue.storage.unreadable_rows import ReadableTime, times_of


def schedule_rows(now: datetime | None = None) -> list[dict[str, Any]]:
    """One row a schedule: the settings' in their order, then the stored ones by name."""
    db = dialects.alias()
    now = now or host_clock.database_now(db)
    last_runs = _last_runs(db)
    rows = [{"name": schedule.name, "source": "settings", "task": schedule.task_path,
             "cron": schedule.cron.expression, "time_zone": str(schedule.time_zone),
             "enabled": True, **_runs(schedule, schedule.name, last_runs, now)}
            for schedule in schedules()]
    stored_rows = PeriodicSchedule.objects.using(db).order_by("name")
    for stored in stored_rows.defer(*times_of(PeriodicSchedule)):  # unused (as the reaper's)
        try:
            plan: Schedule | str = Schedule.from_row(stored)
        except ConfigurationError as exc:
            plan = f"skipped: {exc}"
        rows.append({"name": stored.name, "source": "database", "task": stored.task_path,
                     "cron": stored.cron, "time_zone": stored.time_zone or "UTC",
                     "enabled": stored.enabled, **_runs(plan, stored.name, last_runs, now,
                                                        enabled=stored.enabled)})
    return rows


def last_run() -> ReadableTime:
    """A schedule's last run over its ticks (grouped by name): the newest tick's time,
    or None where a hand edit left it unreadable, as the reaper takes it."""
    return ReadableTime(Max("tick_at"))


def _last_runs(db: str) -> dict[str, datetime | None]:
    """Each schedule's last run, by name."""
    runs = PeriodicTick.objects.using(db).values("name").annotate(last=last_run())
    return dict(runs.values_list("name", "last"))


def _runs(plan: Schedule | str, name: str, last_runs: dict[str, datetime | None], now: datetime,
          enabled: bool = True) -> dict[str, Any]:
    """A row's last run, next run and problem; ``plan`` is the reaper's schedule or why
    the reaper skips the row."""
    upcoming = plan.next_run(now) if isinstance(plan, Schedule) and enabled else None
    last = last_runs.get(name)
    return {"last_run": iso_or_null(last), "next_run": iso_or_null(upcoming),
            "problem": plan if isinstance(plan, str) else ""}
