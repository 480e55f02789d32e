"""``manage.py djqueue_periodic``: every periodic schedule, the settings' and the stored
ones, with its last and next runs, and why the reaper skips one."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from djqueue.models import PeriodicSchedule, PeriodicTick
from tests.conftest import write_unreadable_time

pytestmark = pytest.mark.django_db(transaction=True)
SETTINGS = {"PERIODIC": {"beat": {"task": "tests.tasks.add", "cron": "*/5 * * * *",
                                  "args": [1, 1]}}}


def listed(*args: str) -> str:
    out = StringIO()
    call_command("djqueue_periodic", *args, stdout=out)
    return out.getvalue()


@override_settings(DJQUEUE=SETTINGS)
def test_the_settings_and_the_stored_schedules_with_their_runs():
    for name, fields in [("nightly", {"cron": "30 2 * * *", "time_zone": "Europe/Paris"}),
                         ("paused", {"cron": "0 * * * *", "enabled": False}),
                         ("beat", {"cron": "* * * * *"}),
                         ("bad", {"cron": "0 25 * * *"})]:
        PeriodicSchedule.objects.create(name=name, task_path="tests.tasks.add",
                                        args=[2, 3], **fields)
    ran = datetime(2026, 11, 30, 1, 30, tzinfo=UTC)
    PeriodicTick.objects.create(name="nightly", tick_at=ran)
    PeriodicTick.objects.create(name="nightly", tick_at=ran - timedelta(days=1))
    before = timezone.now()
    rows = {(r["name"], r["source"]): r for r in json.loads(listed("--json"))}
    assert list(rows) == [("beat", "settings"), ("bad", "database"), ("beat", "database"),
                          ("nightly", "database"), ("paused", "database")]
    beat = rows["beat", "settings"]
    assert (beat["task"], beat["cron"], beat["time_zone"], beat["last_run"]) == (
        "tests.tasks.add", "*/5 * * * *", "UTC", None)
    upcoming = datetime.fromisoformat(beat["next_run"])
    assert upcoming.minute % 5 == 0 and timedelta(0) < upcoming - before <= timedelta(minutes=5)
    nightly = rows["nightly", "database"]
    assert datetime.fromisoformat(nightly["last_run"]) == ran
    assert datetime.fromisoformat(nightly["next_run"]).astimezone(
        ZoneInfo("Europe/Paris")).strftime("%H:%M") == "02:30"
    assert rows["paused", "database"]["next_run"] is None
    assert rows["beat", "database"]["problem"] == (
        "skipped: Periodic schedule 'beat': the settings' entry of that name runs instead.")
    assert "out of range 0-23" in rows["bad", "database"]["problem"]

    table = listed().splitlines()
    assert table[0].split() == ["NAME", "SOURCE", "TASK", "CRON", "TIME", "ZONE", "LAST",
                                "RUN", "NEXT", "RUN"]
    assert len(table) == 6
    assert any(line.startswith("paused") and line.endswith("paused") for line in table)


@override_settings(DJQUEUE={})
def test_no_schedule_says_where_to_add_one():
    assert listed() == ("No periodic schedule: add one to DJQUEUE['PERIODIC'] or in the "
                        "admin.\n")


@override_settings(DJQUEUE=SETTINGS)
def test_a_schedule_or_a_last_run_whose_time_cannot_be_read_is_listed_with_the_others():
    """A hand edit can leave a time no driver reads back in a stored schedule's row or in
    a tick. The listing read them all in one statement and failed on either (SQLite,
    PostgreSQL); now such a last run is listed as none, as the reaper takes it."""
    for name in ("edited by hand", "nightly"):
        schedule = PeriodicSchedule.objects.create(name=name, task_path="tests.tasks.add",
                                                   cron="30 2 * * *")
    write_unreadable_time("djqueue_periodicschedule", "updated_at", schedule.pk)
    ran = datetime(2026, 11, 30, 1, 30, tzinfo=UTC)
    PeriodicTick.objects.create(name="beat", tick_at=ran)
    unreadable = PeriodicTick.objects.create(name="nightly", tick_at=ran)
    write_unreadable_time("djqueue_periodictick", "tick_at", unreadable.pk)
    rows = {r["name"]: r for r in json.loads(listed("--json"))}
    assert list(rows) == ["beat", "edited by hand", "nightly"]
    assert datetime.fromisoformat(rows["beat"]["last_run"]) == ran
    assert rows["nightly"]["last_run"] is None and rows["nightly"]["next_run"] is not None
