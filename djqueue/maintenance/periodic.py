"""Periodic django.tasks from ``DJQUEUE["PERIODIC"]``, scheduled by the reaper.

    DJQUEUE = {"PERIODIC": {
        "nightly-report": {"task": "reports.tasks.nightly", "cron": "0 3 * * *",
                           "time_zone": "Europe/Paris", "args": [], "kwargs": {},
                           "catch_up": False},
    }}

The cron is read in UTC unless the entry names a ``time_zone`` (an IANA name), with
cron's rules for the days the zone's clocks change (djqueue.maintenance.cron).

Every pass looks at the current minute: if it matches, the scheduler inserts a
(name, minute) row; the unique constraint lets exactly one of any number of
schedulers win, and the winner enqueues the task in the same transaction.
Minutes missed while no scheduler ran are skipped, unless ``catch_up`` is set
(then up to ``MAX_CATCH_UP`` of them run, oldest first).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from djqueue.conf import get_settings
from djqueue.exceptions import ConfigurationError
from djqueue.maintenance.cron import Cron
from djqueue.models import PeriodicTick
from djqueue.storage import dialects

logger = logging.getLogger("djqueue.periodic")

MAX_CATCH_UP = 60


@dataclass(frozen=True)
class Schedule:
    name: str
    task_path: str
    cron: Cron
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    catch_up: bool = False
    time_zone: tzinfo = UTC

    @classmethod
    def from_setting(cls, name: str, entry: dict[str, Any]) -> Schedule:
        unknown = set(entry) - {"task", "cron", "args", "kwargs", "catch_up", "time_zone"}
        if unknown or "task" not in entry or "cron" not in entry:
            raise ConfigurationError(
                f"PERIODIC[{name!r}] needs 'task' and 'cron' (and may have 'args', 'kwargs', "
                f"'catch_up', 'time_zone'); unknown keys: {sorted(unknown)}")
        return cls(name, entry["task"], Cron.parse(entry["cron"]), list(entry.get("args", [])),
                   dict(entry.get("kwargs", {})), bool(entry.get("catch_up", False)),
                   _zone(name, entry.get("time_zone")))

    def matches(self, minute: datetime) -> bool:
        """Whether the UTC ``minute`` is one of the cron's, on its time zone's clocks."""
        return self.cron.matches_in(minute, self.time_zone)


def _zone(name: str, value: object) -> tzinfo:
    if value is None:
        return UTC
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        return ZoneInfo(value)
    except (ValueError, OSError, ZoneInfoNotFoundError):
        raise ConfigurationError(
            f"PERIODIC[{name!r}] time_zone {value!r} is not a time zone's IANA name "
            "(such as 'Europe/Paris'; leave it out for UTC).") from None


def schedules() -> list[Schedule]:
    return [Schedule.from_setting(n, e) for n, e in get_settings().PERIODIC.items()]


class Scheduler:
    def __init__(self) -> None:
        self.schedules = schedules()

    def tick(self, now: datetime | None = None) -> int:
        """Enqueue what is due now; returns how many runs this scheduler enqueued."""
        minute = (now or timezone.now()).replace(second=0, microsecond=0)
        enqueued = 0
        for schedule in self.schedules:
            for moment in self._due(schedule, minute):
                enqueued += self._claim_and_enqueue(schedule, moment)
        return enqueued

    def _due(self, schedule: Schedule, minute: datetime) -> list[datetime]:
        if not schedule.catch_up:
            return [minute] if schedule.matches(minute) else []
        last = (PeriodicTick.objects.using(dialects.alias()).filter(name=schedule.name)
                .order_by("-tick_at").values_list("tick_at", flat=True).first())
        if last is None:
            return [minute] if schedule.matches(minute) else []
        moments, moment = [], minute
        while moment > last and len(moments) < MAX_CATCH_UP:
            if schedule.matches(moment):
                moments.append(moment)
            moment -= timedelta(minutes=1)
        return sorted(moments)

    def _claim_and_enqueue(self, schedule: Schedule, moment: datetime) -> int:
        db = dialects.alias()
        try:
            with transaction.atomic(using=db):
                tick = PeriodicTick.objects.using(db).create(name=schedule.name, tick_at=moment)
                result = import_string(schedule.task_path).enqueue(*schedule.args,
                                                                   **schedule.kwargs)
                tick.task_result_id = result.id
                tick.save(using=db, update_fields=["task_result_id"])
        except IntegrityError:
            return 0  # another scheduler took this tick
        logger.info("Enqueued %s for %s", schedule.name, moment.isoformat(),
                    extra={"schedule": schedule.name, "task_result_id": result.id})
        return 1
