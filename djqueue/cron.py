"""Five-field cron expressions, minute hour day-of-month month day-of-week, and the time
zones they are read in (periodic tasks' schedules; this module sits low so that the
stored schedule's model can check its own fields).

Each field takes ``*``, numbers, ranges ``a-b``, steps ``*/n`` or ``a-b/n``, and
comma lists; day-of-week counts 0-6 from Sunday (7 is Sunday too). As in cron,
when both day fields are restricted a day matching either one matches.

An expression is read on the clocks of a time zone (:meth:`Cron.matches_in`), with
cron's rules for the days those clocks change: where they go back and repeat an
hour, a cron that names its hours runs in the first pass only, one for every hour
in both; where they go forward and skip one, a cron that names its hours and whose
time fell in the gap runs at the first minute after it, rather than not that day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from djqueue.exceptions import ConfigurationError

FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12),
          ("day of week", 0, 7))
EVERY_HOUR = frozenset(range(24))
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
#: How far ahead a next run is looked for. A 29 February cron's is at most eight years
#: away (2096 to 2104: 2100 is no leap year); a cron with none in that span never runs.
NEXT_RUN_WITHIN = timedelta(days=8 * 366 + 1)


def _parse_field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if body == "*":
                start, end = low, high
            elif "-" in body:
                start, end = (int(v) for v in body.split("-", 1))
            else:
                start = end = int(body)
        except ValueError:
            raise ConfigurationError(f"Bad cron {name} field {text!r}.") from None
        if step < 1 or not (low <= start <= end <= high):
            raise ConfigurationError(f"Cron {name} field {text!r} is out of range {low}-{high}.")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, expression: str) -> Cron:
        parts = expression.split()
        if len(parts) != 5:
            raise ConfigurationError(f"Cron expression {expression!r} needs 5 fields.")
        fields = [_parse_field(p, *spec) for p, spec in zip(parts, FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in fields[4])
        minutes, hours, days, months, _ = fields
        return cls(expression, minutes, hours, days, months, weekdays,
                   days_restricted=parts[2] != "*", weekdays_restricted=parts[4] != "*")

    def matches_in(self, minute: datetime, zone: tzinfo) -> bool:
        """Whether the aware ``minute`` is one of this cron's, read on ``zone``'s clocks
        (the rules for the days they change are the module's)."""
        local = minute.astimezone(zone)
        wall = local.replace(tzinfo=None, fold=0)
        names_hours = self.hours != EVERY_HOUR
        if local.fold:  # the second pass of an hour the clocks repeat
            return not names_hours and self.matches(wall)
        if self.matches(wall):
            return True
        if not names_hours:
            return False
        skipped = (minute - MINUTE).astimezone(zone).replace(tzinfo=None, fold=0) + MINUTE
        while skipped < wall:  # the wall-clock minutes the clocks jumped over, if any
            if self.matches(skipped):
                return True
            skipped += MINUTE
        return False

    def matches(self, moment: datetime) -> bool:
        """Whether ``moment``'s own fields (its wall-clock time) are one of this cron's."""
        return (moment.minute in self.minutes and moment.hour in self.hours
                and self._matches_day(moment.date()))

    def next_in(self, after: datetime, zone: tzinfo,
                within: timedelta = NEXT_RUN_WITHIN) -> datetime | None:
        """The first UTC minute after ``after`` that :meth:`matches_in` ``zone``, if one
        comes within ``within`` (what the admin shows as a schedule's next run; None
        within the default span means the cron never runs)."""
        start = after.astimezone(UTC).replace(second=0, microsecond=0) + MINUTE
        day, last = (start - 2 * HOUR).astimezone(zone).date(), (after + within).date()
        while day <= last:
            if self._matches_day(day):
                found = self._first_on(day, start, zone)
                if found is not None:
                    return found
            day += timedelta(days=1)
        return None

    def _first_on(self, day: date, start: datetime, zone: tzinfo) -> datetime | None:
        """The first run on ``day``'s wall clock at or after ``start``. Each (hour,
        minute) is read in both passes of a repeated hour, so wall-clock order is not
        run order there: the earliest found within three hours of wall clock wins. A
        time the clocks skipped is found by reading the minutes around it."""
        # Wall-clock times hours before the start cannot be after it, whatever the zone.
        too_early = start.astimezone(zone).replace(tzinfo=None) - 3 * HOUR
        best: datetime | None = None
        best_wall: datetime | None = None
        hours = [hour for hour in sorted(self.hours)
                 if day > too_early.date() or hour >= too_early.hour]
        for wall in (datetime.combine(day, time(hour, minute))
                     for hour in hours for minute in sorted(self.minutes)):
            if wall < too_early:
                continue
            if best_wall is not None and wall > best_wall + 3 * HOUR:
                break
            runs = sorted({wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
                           for fold in (0, 1)})
            found = [moment for moment in runs if self.matches_in(moment, zone)]
            if not found:  # in a gap: it runs at the first minute after the jump
                moment = max(start, runs[0] - 2 * HOUR)
                while moment <= runs[-1] + 2 * HOUR and not found:
                    found = [moment] if self.matches_in(moment, zone) else []
                    moment += MINUTE
            for moment in found:
                if moment >= start and (best is None or moment < best):
                    best, best_wall = moment, min(best_wall or wall, wall)
        return best

    def _matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        day_ok = day.day in self.days
        weekday_ok = (day.weekday() + 1) % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return day_ok or weekday_ok
        return day_ok and weekday_ok


def parse_time_zone(value: object, where: str) -> tzinfo:
    """The zone an IANA name names (None: UTC); ConfigurationError naming ``where``."""
    if value is None:
        return UTC
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        return ZoneInfo(value)
    except (ValueError, OSError, ZoneInfoNotFoundError):
        raise ConfigurationError(
            f"{where} time_zone {value!r} is not a time zone's IANA name "
            "(such as 'Europe/Paris'; leave it out for UTC).") from None
