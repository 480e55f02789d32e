"""Cron expressions: their fields, and their runs on a time zone's clocks."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from djqueue.cron import Cron
from djqueue.exceptions import ConfigurationError

# 2026-11-22 is a Sunday.
CASES = [
    ("* * * * *", datetime(2026, 11, 22, 10, 7), True),
    ("7 10 * * *", datetime(2026, 11, 22, 10, 7), True),
    ("8 10 * * *", datetime(2026, 11, 22, 10, 7), False),
    ("*/15 * * * *", datetime(2026, 11, 22, 10, 45), True),
    ("*/15 * * * *", datetime(2026, 11, 22, 10, 46), False),
    ("0-10/5 9-17 * * *", datetime(2026, 11, 22, 9, 10), True),
    ("0 0 1,15 * *", datetime(2026, 11, 15, 0, 0), True),
    ("0 0 * 11 *", datetime(2026, 12, 1, 0, 0), False),
    ("0 0 * * 0", datetime(2026, 11, 22, 0, 0), True),
    ("0 0 * * 7", datetime(2026, 11, 22, 0, 0), True),
    ("0 0 * * 1-5", datetime(2026, 11, 22, 0, 0), False),
    ("0 0 13 * 5", datetime(2026, 11, 13, 0, 0), True),   # either day field matches
    ("0 0 13 * 5", datetime(2026, 11, 20, 0, 0), True),
    ("0 0 13 * 5", datetime(2026, 11, 21, 0, 0), False),
]


@pytest.mark.parametrize(("expression", "moment", "expected"), CASES)
def test_matches(expression, moment, expected):
    assert Cron.parse(expression).matches(moment) is expected


@pytest.mark.parametrize("bad", ["* * * *", "60 * * * *", "* 24 * * *", "*/0 * * * *",
                                 "a * * * *", "5-1 * * * *", "* * 0 * *", "* * * 13 *"])
def test_bad_expressions_are_refused(bad):
    with pytest.raises(ConfigurationError):
        Cron.parse(bad)


def minute_by_minute(cron: Cron, after: datetime, zone, within: timedelta) -> datetime | None:
    """The next run found by reading every minute: slow, and plainly right."""
    moment = after.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    while moment <= after + within:
        if cron.matches_in(moment, zone):
            return moment
        moment += timedelta(minutes=1)
    return None


# Days the clocks change: Paris forward and back, New York forward and back; Lord Howe
# moves them by half an hour.
CLOCK_CHANGES = [datetime(2026, 3, 29, 0, 0, tzinfo=UTC), datetime(2026, 10, 25, 0, 0, tzinfo=UTC),
                 datetime(2026, 3, 8, 6, 0, tzinfo=UTC), datetime(2026, 11, 1, 5, 0, tzinfo=UTC),
                 datetime(2026, 4, 4, 14, 0, tzinfo=UTC)]


@pytest.mark.parametrize("expression", ["30 2 * * *", "* * * * *", "*/30 * * * *",
                                        "15 3 * * 1-5", "* 2 * * *", "0 0-12 * * *"])
@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/New_York",
                                  "Australia/Lord_Howe"])
def test_the_next_run_is_the_first_minute_that_runs(expression, zone):
    cron, zone = Cron.parse(expression), ZoneInfo(zone)
    for day in CLOCK_CHANGES:
        for offset in range(0, 300, 13):
            after = day + timedelta(minutes=offset, seconds=13)
            assert cron.next_in(after, zone, timedelta(days=3)) == minute_by_minute(
                cron, after, zone, timedelta(days=3)), (expression, zone, after)


def test_a_next_run_years_away_and_none_within_the_limit():
    leap = Cron.parse("0 0 29 2 *")
    after = datetime(2026, 5, 5, 12, 0, tzinfo=UTC)
    assert leap.next_in(after, ZoneInfo("Europe/Paris"), timedelta(days=1500)) == datetime(
        2028, 2, 28, 23, 0, tzinfo=UTC)  # midnight in Paris
    assert leap.next_in(after, UTC, timedelta(days=365)) is None


def test_the_default_span_finds_a_29_february_across_a_century_that_skips_one():
    leap, after = Cron.parse("0 0 29 2 *"), datetime(2096, 3, 1, tzinfo=UTC)
    assert leap.next_in(after, UTC) == datetime(2104, 2, 29, tzinfo=UTC)  # 2100 has none
    assert Cron.parse("0 0 31 2 *").next_in(after, UTC) is None
