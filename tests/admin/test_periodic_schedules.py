"""Periodic schedules kept in the database, through the admin: the form refuses what the
reaper could not run, the list shows the last and next runs, and its actions run a
schedule's task at once or pause it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from djqueue.models import Message, PeriodicSchedule, PeriodicTick
from djqueue.tasks import known_tasks

pytestmark = pytest.mark.django_db(transaction=True)
ADD = "admin:djqueue_periodicschedule_add"
LIST = "admin:djqueue_periodicschedule_changelist"
GOOD = {"name": "nightly", "task_path": "tests.tasks.add", "cron": "30 2 * * *",
        "time_zone": "Europe/Paris", "args": "[2, 3]", "kwargs": "{}", "enabled": "on"}


def form_errors(client: Client, **changes: str) -> dict[str, list[str]]:
    response = client.post(reverse(ADD), {**GOOD, **changes})
    assert response.status_code == 200, "the form was saved"
    form = response.context["adminform"].form
    return {field: [str(e) for e in errors] for field, errors in form.errors.items()}


def test_the_form_offers_the_defined_tasks_and_saves_a_schedule(superuser):
    page = superuser.get(reverse(ADD))
    offered = [value for value, _ in page.context["adminform"].form.fields["task_path"].choices]
    assert "tests.tasks.add" in offered and "tests.tasks.which_attempt" in offered
    assert offered == known_tasks.paths()  # the tasks defined for a djqueue backend alone
    response = superuser.post(reverse(ADD), GOOD)
    assert response.status_code == 302
    row = PeriodicSchedule.objects.get()
    assert (row.task_path, row.cron, row.time_zone, row.args, row.kwargs, row.enabled) == (
        "tests.tasks.add", "30 2 * * *", "Europe/Paris", [2, 3], {}, True)


@override_settings(DJQUEUE={"PERIODIC": {"beat": {"task": "tests.tasks.add",
                                                  "cron": "* * * * *", "args": [1, 1]}}})
@pytest.mark.parametrize(("changes", "field", "said"), [
    ({"task_path": "os.system"}, "task_path", "Select a valid choice"),
    ({"cron": "61 * * * *"}, "cron", "out of range 0-59"),
    ({"cron": "every night"}, "cron", "needs 5 fields"),
    ({"cron": "0 0 31 2 *"}, "cron", "This cron never runs"),
    ({"args": "[1e999, 2]"}, "args", "Numbers must be finite"),
    ({"kwargs": '{"a": NaN, "b": 1}', "args": "[]"}, "kwargs", "Numbers must be finite"),
    ({"time_zone": "Mars/Olympus_Mons"}, "time_zone", "Select a valid choice"),
    ({"args": '{"a": 1}'}, "args", "A JSON list"),
    ({"kwargs": "[1]"}, "kwargs", "A JSON object"),
    ({"args": "[1, 2, 3]"}, "__all__", "do not fit tests.tasks.add"),
    ({"args": "[1]", "kwargs": '{"c": 2}'}, "__all__", "do not fit tests.tasks.add"),
    ({"name": "beat"}, "name", "in the settings has an entry of that name"),
])
def test_the_form_refuses_what_the_reaper_could_not_run(superuser, changes, field, said):
    errors = form_errors(superuser, **changes)
    assert list(errors) == [field], errors
    assert said in " ".join(errors[field]), errors
    assert not PeriodicSchedule.objects.exists()


def test_a_task_that_takes_its_context_is_given_its_other_arguments(superuser):
    response = superuser.post(reverse(ADD), {
        **GOOD, "task_path": "tests.tasks.which_attempt", "args": '["marker"]'})
    assert response.status_code == 302
    assert PeriodicSchedule.objects.get().args == ["marker"]


def test_the_list_shows_last_and_next_runs_and_runs_or_pauses_a_schedule(superuser):
    nightly = PeriodicSchedule.objects.create(name="nightly", task_path="tests.tasks.add",
                                              cron="30 2 * * *", time_zone="Europe/Paris",
                                              args=[2, 3])
    PeriodicSchedule.objects.create(name="gone", task_path="tests.tasks.vanished",
                                    cron="* * * * *")
    ran = datetime(2026, 11, 20, 1, 30, tzinfo=UTC)
    PeriodicTick.objects.create(name="nightly", tick_at=ran)
    PeriodicTick.objects.create(name="nightly", tick_at=ran - timedelta(days=1))
    page = superuser.get(reverse(LIST))
    rows = {row.name: row for row in page.context["cl"].result_list}
    admin = page.context["cl"].model_admin
    assert admin.last_run(rows["nightly"]) == ran
    upcoming = admin.next_run(rows["nightly"])
    local = upcoming.astimezone(ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute) == (2, 30) and upcoming > timezone.now()
    assert upcoming - timezone.now() <= timedelta(days=1, hours=1)
    assert admin.last_run(rows["gone"]) is None
    assert admin.next_run(rows["gone"]) == (
        "never: tests.tasks.vanished is no longer a defined task")

    response = superuser.post(reverse(LIST), {"action": "run_now",
                                              "_selected_action": [nightly.pk]}, follow=True)
    said = [str(m) for m in response.context["messages"]]
    [message] = Message.objects.all()
    assert message.payload["task"] == "tests.tasks.add" and message.payload["args"] == [2, 3]
    assert said == [f"nightly: enqueued tests.tasks.add (result {message.pk})."]

    gone = PeriodicSchedule.objects.get(name="gone")
    response = superuser.post(reverse(LIST), {"action": "run_now",
                                              "_selected_action": [gone.pk]}, follow=True)
    [said] = [str(m) for m in response.context["messages"]]
    assert said.startswith("gone: not enqueued: 'tests.tasks.vanished' is not a task")
    assert Message.objects.count() == 1

    superuser.post(reverse(LIST), {"action": "disable", "_selected_action": [nightly.pk]})
    assert not PeriodicSchedule.objects.get(pk=nightly.pk).enabled
    page = superuser.get(reverse(LIST))
    assert page.context["cl"].model_admin.next_run(
        PeriodicSchedule.objects.get(pk=nightly.pk)) == "paused"



@override_settings(DJQUEUE={"PERIODIC": {"beat": {"task": "tests.tasks.add",
                                                  "cron": "* * * * *", "args": [1, 1]}}})
def test_a_row_written_from_code_is_checked_by_full_clean_field_by_field():
    row = PeriodicSchedule(name="beat", task_path="tests.tasks.add", cron="0 0 30 2 *",
                           time_zone="Mars/Olympus_Mons", args={"a": 1},
                           kwargs={"b": float("nan")})
    with pytest.raises(ValidationError) as refused:
        row.full_clean()
    said = {field: " ".join(errors) for field, errors in refused.value.message_dict.items()}
    assert sorted(said) == ["args", "kwargs", "name", "time_zone"], said
    assert "in the settings has an entry of that name" in said["name"]
    assert "not a time zone's IANA name" in said["time_zone"]
    assert "A JSON list" in said["args"] and "Numbers must be finite" in said["kwargs"]
    row.time_zone = "Europe/Paris"
    with pytest.raises(ValidationError, match="This cron never runs"):
        row.full_clean()
    PeriodicSchedule(name="fine", task_path="tests.tasks.add", cron="0 3 29 2 *",
                     args=[1, 2]).full_clean()


def test_a_row_the_settings_came_to_name_shows_that_it_never_runs(superuser):
    PeriodicSchedule.objects.create(name="beat", task_path="tests.tasks.add",
                                    cron="* * * * *", args=[1, 1])
    with override_settings(DJQUEUE={"PERIODIC": {"beat": {"task": "tests.tasks.add",
                                                          "cron": "*/5 * * * *"}}}):
        page = superuser.get(reverse(LIST))
        [row] = page.context["cl"].result_list
        assert page.context["cl"].model_admin.next_run(row) == (
            "never: Periodic schedule 'beat': the settings' entry of that name runs instead.")


def test_a_schedules_page_shows_its_next_runs_on_its_clocks_and_in_utc(superuser):
    nightly = PeriodicSchedule.objects.create(name="nightly", task_path="tests.tasks.add",
                                              cron="30 2 * * *", time_zone="Europe/Paris",
                                              args=[2, 3])
    page = superuser.get(reverse("admin:djqueue_periodicschedule_change", args=[nightly.pk]))
    runs = re.findall(r"\w{3} \d\d \w{3} \d{4} 02:30 (CES?T) \((0[01]):30 UTC\)",
                      page.content.decode())
    assert len(runs) == 5, page.content.decode()[-3000:]
    assert all((zone, hour) in {("CET", "01"), ("CEST", "00")} for zone, hour in runs)
    assert "next runs" not in superuser.get(reverse(ADD)).content.decode()
