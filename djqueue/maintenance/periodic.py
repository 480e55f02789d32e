"""Periodic django.tasks, scheduled by the reaper: from ``DJQUEUE["PERIODIC"]`` and from
the schedules kept in the database (``PeriodicSchedule``, edited in the admin).

    DJQUEUE = {"PERIODIC": {
        "nightly-report": {"task": "reports.tasks.nightly", "cron": "0 3 * * *",
                           "time_zone": "Europe/Paris", "args": [], "kwargs": {},
                           "catch_up": False},
    }}

The cron is read in UTC unless the entry names a ``time_zone`` (an IANA name), with
cron's rules for the days the zone's clocks change (djqueue.cron).

Every pass looks at the current minute: if it matches, the scheduler inserts a
(name, minute) row; the unique constraint lets exactly one of any number of
schedulers win, and the winner enqueues the task in the same transaction.
Minutes missed while no scheduler ran are skipped, unless ``catch_up`` is set
(then up to ``MAX_CATCH_UP`` of them run, oldest first).

A setting's task is imported by its path (the settings are the project's own code);
a stored schedule's is only looked up among the tasks defined for a djqueue backend
(djqueue.tasks.known_tasks, which djqueue's AppConfig hands to
:func:`look_up_stored_tasks_with`): a row names a task, it does not choose code to
import. The stored schedules are read once a minute, so an edit counts from the next
minute; a row that is wrong (a bad cron, a task no longer defined, a name the
settings use) is logged and skipped, and the other schedules run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from django.db import DatabaseError, IntegrityError, transaction
from django.utils.module_loading import import_string

from djqueue.conf import get_settings
from djqueue.cron import Cron, parse_time_zone
from djqueue.exceptions import ConfigurationError
from djqueue.models import PeriodicSchedule, PeriodicTick
from djqueue.storage import dialects, host_clock
from djqueue.storage.unreadable_rows import UNREADABLE, times_of

logger = logging.getLogger("djqueue.periodic")

MAX_CATCH_UP = 60
#: How a stored schedule's task is found (None: no tasks framework is installed).
_stored_task_lookup: Callable[[str], Any] | None = None


def look_up_stored_tasks_with(find: Callable[[str], Any]) -> None:
    """Find the tasks of stored schedules with ``find`` (djqueue's AppConfig passes the
    known tasks' lookup: this layer may not import the tasks package)."""
    global _stored_task_lookup
    _stored_task_lookup = find


@dataclass(frozen=True)
class Schedule:
    """One periodic task, from a setting's entry or a stored row: checked as it is made."""

    name: str
    task_path: str
    cron: Cron
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    catch_up: bool = False
    time_zone: tzinfo = UTC
    #: Kept in the database (its task is looked up, not imported).
    stored: bool = False

    @classmethod
    def from_setting(cls, name: str, entry: dict[str, Any]) -> Schedule:
        unknown = set(entry) - {"task", "cron", "args", "kwargs", "catch_up", "time_zone"}
        if unknown or "task" not in entry or "cron" not in entry:
            raise ConfigurationError(
                f"PERIODIC[{name!r}] needs 'task' and 'cron' (and may have 'args', 'kwargs', "
                f"'catch_up', 'time_zone'); unknown keys: {sorted(unknown)}")
        return cls(name, entry["task"], Cron.parse(entry["cron"]), list(entry.get("args", [])),
                   dict(entry.get("kwargs", {})), bool(entry.get("catch_up", False)),
                   parse_time_zone(entry.get("time_zone"), f"PERIODIC[{name!r}]"))

    @classmethod
    def from_row(cls, row: PeriodicSchedule) -> Schedule:
        where = f"Periodic schedule {row.name!r}"
        if row.name in get_settings().PERIODIC:
            raise ConfigurationError(f"{where}: the settings' entry of that name runs "
                                     "instead.")
        if not isinstance(row.args, list) or not isinstance(row.kwargs, dict):
            raise ConfigurationError(f"{where}: args must be a JSON list and kwargs a JSON "
                                     "object.")
        try:
            cron = Cron.parse(row.cron)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None
        return cls(row.name, row.task_path, cron, row.args, row.kwargs, row.catch_up,
                   parse_time_zone(row.time_zone or None, where), stored=True)

    def matches(self, minute: datetime) -> bool:
        """Whether the UTC ``minute`` is one of the cron's, on its time zone's clocks."""
        return self.cron.matches_in(minute, self.time_zone)

    def next_run(self, after: datetime) -> datetime | None:
        """The first minute after ``after`` this schedule runs at (None: never)."""
        return self.cron.next_in(after, self.time_zone)

    def task(self) -> Any:
        """The task to enqueue: imported for a setting, looked up for a stored schedule."""
        if not self.stored:
            return import_string(self.task_path)
        if _stored_task_lookup is None:
            raise ConfigurationError(f"Periodic schedule {self.name!r} needs django.tasks "
                                     "(or the django-tasks backport) to run its task.")
        return _stored_task_lookup(self.task_path)


def schedules() -> list[Schedule]:
    return [Schedule.from_setting(n, e) for n, e in get_settings().PERIODIC.items()]


class Scheduler:
    """The reaper's periodic step: each pass enqueues the runs due this minute, once
    whatever the number of reapers."""

    def __init__(self) -> None:
        #: The settings' schedules (checked once: a mistake there stops the reaper).
        self.configured = schedules()
        self._stored: list[Schedule] = []
        self._stored_read_at: datetime | None = None
        #: (name, minute) whose enqueue failed: logged once, not tried again.
        self._failed: set[tuple[str, datetime]] = set()

    def tick(self, now: datetime | None = None) -> int:
        """Enqueue what is due now; returns how many runs this scheduler enqueued."""
        minute = (now or host_clock.database_now(dialects.alias())).replace(second=0, microsecond=0)
        if minute != self._stored_read_at:
            self._stored, self._stored_read_at = self._read_stored(), minute
            gone = minute - timedelta(minutes=MAX_CATCH_UP + 1)
            self._failed = {(name, at) for name, at in self._failed if at > gone}
        enqueued = 0
        for schedule in (*self.configured, *self._stored):
            for moment in self._due(schedule, minute):
                enqueued += self._claim_and_enqueue(schedule, moment)
        return enqueued

    def _read_stored(self) -> list[Schedule]:
        """The enabled stored schedules; a wrong one is logged and left out."""
        found = []
        rows = PeriodicSchedule.objects.using(dialects.alias()).filter(enabled=True)
        # Not their times, which a schedule does not use: a hand edit may have left one
        # unreadable, and one such row stopped every schedule.
        for row in rows.defer(*times_of(PeriodicSchedule)):
            try:
                found.append(Schedule.from_row(row))
            except ConfigurationError as exc:
                logger.error("%s It is skipped.", exc, extra={"schedule": row.name})
        return found

    def _due(self, schedule: Schedule, minute: datetime) -> list[datetime]:
        if not schedule.catch_up:
            return [minute] if schedule.matches(minute) else []
        try:
            last = (PeriodicTick.objects.using(dialects.alias()).filter(name=schedule.name)
                    .order_by("-tick_at").values_list("tick_at", flat=True).first())
        except UNREADABLE as exc:  # a hand edit; raised, it stopped every schedule
            logger.error("The last run of periodic task %s cannot be read (%s); it runs as "
                         "if it had none until its row in djqueue_periodictick is mended.",
                         schedule.name, exc, extra={"schedule": schedule.name})
            last = None
        if last is None:
            return [minute] if schedule.matches(minute) else []
        moments: list[datetime] = []
        moment = minute
        while moment > last and len(moments) < MAX_CATCH_UP:
            if schedule.matches(moment):
                moments.append(moment)
            moment -= timedelta(minutes=1)
        return sorted(moments)

    def _claim_and_enqueue(self, schedule: Schedule, moment: datetime) -> int:
        if (schedule.name, moment) in self._failed:
            return 0
        db = dialects.alias()
        try:
            with transaction.atomic(using=db):
                tick = PeriodicTick.objects.using(db).create(name=schedule.name, tick_at=moment)
                result = schedule.task().enqueue(*schedule.args, **schedule.kwargs)
                tick.task_result_id = result.id
                tick.save(using=db, update_fields=["task_result_id"])
        except IntegrityError:
            return 0  # another scheduler took this tick
        except DatabaseError:
            raise  # the reaper's step closes the connection; the next pass tries again
        except Exception as exc:  # the task is gone, or refused its arguments: the others run
            self._failed.add((schedule.name, moment))
            logger.error("Periodic task %s could not be enqueued for %s (that run is "
                         "skipped): %s", schedule.name, moment.isoformat(), exc,
                         exc_info=True, extra={"schedule": schedule.name})
            return 0
        logger.info("Enqueued %s for %s", schedule.name, moment.isoformat(),
                    extra={"schedule": schedule.name, "task_result_id": result.id})
        return 1
