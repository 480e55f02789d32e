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
from django.utils import timezone

from djqueue.exceptions import ConfigurationError
from djqueue.maintenance.periodic import Schedule, schedules
from djqueue.models import PeriodicSchedule, PeriodicTick
from djqueue.storage import dialects


def schedule_rows(now: datetime | None = None) -> list[dict[str, Any]]:
    """One row a schedule: the settings' in their order, then the stored ones by name."""
    now = now or timezone.now()
    db = dialects.alias()
    last_runs = dict(PeriodicTick.objects.using(db).values("name").annotate(last=Max("tick_at"))
                     .values_list("name", "last"))
    rows = []
    for schedule in schedules():
        rows.append(_row(schedule.name, "settings", schedule.task_path, schedule.cron.expression,
                         schedule.time_zone, True, schedule, "", last_runs, now))
    configured = {row["name"] for row in rows}
    for stored in PeriodicSchedule.objects.using(db).order_by("name"):
        plan: Schedule | None = None
        try:
            plan = Schedule.from_row(stored)
            problem = ("skipped: the settings' entry of that name runs"
                       if stored.name in configured else "")
        except ConfigurationError as exc:
            problem = f"skipped: {exc}"
        rows.append(_row(stored.name, "database", stored.task_path, stored.cron,
                         stored.time_zone or "UTC", stored.enabled, plan, problem,
                         last_runs, now))
    return rows


def _row(name: str, source: str, task: str, cron: str, zone: object, enabled: bool,
         plan: Schedule | None, problem: str, last_runs: dict[str, datetime],
         now: datetime) -> dict[str, Any]:
    upcoming = plan.next_run(now) if plan is not None and enabled and not problem else None
    last = last_runs.get(name)
    return {"name": name, "source": source, "task": task, "cron": cron,
            "time_zone": str(zone), "enabled": enabled,
            "last_run": last.isoformat() if last else None,
            "next_run": upcoming.isoformat() if upcoming else None, "problem": problem}
