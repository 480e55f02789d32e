"""The admin shows a row holding a time no driver reads back (a hand edit: PostgreSQL's
'infinity', text on SQLite that is no date, MariaDB's zero date) with the others, that
time empty, in its list, on one page or several, and on its own page; before, such a
row failed every list holding it (a 500) and its own page (a 500, or on SQLite a
"doesn't exist" redirect), the very pages a person opens to find and mend it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.db import connection
from django.urls import reverse
from django.utils import timezone

import djqueue
from djqueue.models import (
    AlarmPolicy,
    ApiClient,
    ApiToken,
    ConsumerGroup,
    History,
    Message,
    Metric,
    Period,
    PeriodicSchedule,
    PeriodicTick,
    Queue,
    QueueStat,
    State,
    TraceEvent,
    Worker,
    WorkflowStep,
)
from djqueue.storage.unreadable_rows import first_row
from tests.conftest import write_unreadable_time

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_dead_letter_and_its_trace_whose_times_cannot_be_read_are_listed_and_shown(
        superuser, monkeypatch):
    dead = djqueue.create_queue("a.dead", trace=True)
    djqueue.create_queue("a.jobs", max_attempts=1, dead_letter_queue=dead, trace=True)
    sent = djqueue.send_batch("a.jobs", [{"n": i} for i in range(3)])
    for message in djqueue.receive("a.jobs", max_messages=3):
        message.nack(error="boom")
    edited = sent[0].pk
    for column in ("sent_at", "visible_at"):
        write_unreadable_time("djqueue_message", column, edited)
    write_unreadable_time("djqueue_traceevent", "at",
                          TraceEvent.objects.filter(message_id=edited).order_by("pk")[0].pk)
    changelist = reverse("admin:djqueue_message_changelist")
    listed = superuser.get(changelist, {"state__exact": State.DEAD})
    assert listed.status_code == 200
    assert [m.pk for m in listed.context["cl"].result_list] == [m.pk for m in sent][::-1]
    # A list of several pages reads its page the same way.
    monkeypatch.setattr(admin.site._registry[Message], "list_per_page", 2)
    last = superuser.get(changelist, {"state__exact": State.DEAD, "p": 2})
    assert [m.pk for m in last.context["cl"].result_list] == [edited]
    assert last.context["cl"].result_list[0].sent_at is None
    page = superuser.get(reverse("admin:djqueue_message_change", args=[edited]))
    assert page.status_code == 200
    assert page.context["original"].sent_at is None
    assert b"<tr><td>unreadable</td><td>sent</td>" in page.content  # its trace's first event


def test_worker_history_and_alarm_rows_whose_times_cannot_be_read_are_listed_and_shown(
        superuser):
    djqueue.create_queue("a.jobs")
    djqueue.send_batch("a.jobs", [{"n": i} for i in range(2)])
    for message in djqueue.receive("a.jobs", max_messages=2):
        message.ack()
    Worker.objects.create(id="w:1", hostname="h", pid=1, lock_key="f" * 32, queues=["a.jobs"])
    policy = AlarmPolicy.objects.create(name="late", metric=Metric.OLDEST_AGE, threshold=60)
    history = History.objects.order_by("pk")[0].pk
    for table, column, pk in [("djqueue_worker", "heartbeat_at", "w:1"),
                              ("djqueue_worker", "started_at", "w:1"),
                              ("djqueue_history", "sent_at", history),
                              ("djqueue_alarmpolicy", "last_fired_at", policy.pk)]:
        write_unreadable_time(table, column, pk)
    for name, pk, count in [("worker", "w:1", 1), ("history", history, 2),
                            ("alarmpolicy", policy.pk, 1)]:
        listed = superuser.get(reverse(f"admin:djqueue_{name}_changelist"))
        assert listed.status_code == 200, name
        assert len(listed.context["cl"].result_list) == count, name
        page = superuser.get(reverse(f"admin:djqueue_{name}_change", args=[pk]))
        assert page.status_code == 200, name
        assert page.context["original"].pk == pk, name


def test_the_message_browser_lists_its_queue_filter_past_a_queue_whose_time_cannot_be_read(
        superuser):
    """The browser's filter by queue read every queue row whole for its choices, so one
    queue whose creation time a hand edit left unreadable failed the browser for every
    queue (a 500): the choices are read without the rows' times now."""
    djqueue.create_queue("a.jobs")
    edited = djqueue.create_queue("a.edited")
    djqueue.send("a.jobs", {"n": 1})
    write_unreadable_time("djqueue_queue", "created_at", edited.pk)
    listed = superuser.get(reverse("admin:djqueue_message_changelist"))
    assert listed.status_code == 200
    [queues] = [f for f in listed.context["cl"].filter_specs if f.title == "queue"]
    assert sorted(name for _, name in queues.lookup_choices) == ["a.edited", "a.jobs"]
    assert len(listed.context["cl"].result_list) == 1


def _form_of(page: Any, **changed: object) -> dict[str, object]:
    """What a person submits from ``page``'s form, with ``changed`` typed in."""
    form = page.context["adminform"].form
    data: dict[str, object] = {}
    for name in form.fields:
        value = form[name].value()
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        else:
            data[name] = "" if value is None else value
    for inline in page.context.get("inline_admin_formsets", []):
        formset = inline.formset
        for form in [formset.management_form, *formset.forms]:
            for name in form.fields:
                value = form[name].value()
                if isinstance(value, bool):
                    if value:
                        data[form.add_prefix(name)] = "on"
                else:
                    data[form.add_prefix(name)] = "" if value is None else value
    return {**data, **changed}


def test_a_queue_whose_creation_time_cannot_be_read_is_listed_edited_and_saved(superuser):
    """The queue's page listed every queue whole as choices of its dead-letter queue, and
    its list joined each queue's dead-letter queue whole, so one queue whose creation
    time a hand edit left unreadable failed both, for every queue; a save wrote that
    time back as it was shown (none), and failed. Choices and joined rows are read
    without their times, and a save leaves a time its form does not edit as stored."""
    dead = djqueue.create_queue("a.dead")
    jobs = djqueue.create_queue("a.jobs", dead_letter_queue=dead)
    write_unreadable_time("djqueue_queue", "created_at", dead.pk)
    listed = superuser.get(reverse("admin:djqueue_queue_changelist"))
    assert listed.status_code == 200
    assert {q.name: str(q.dead_letter_queue) for q in listed.context["cl"].result_list} == {
        "a.dead": "None", "a.jobs": "a.dead"}
    for queue, changed in [(jobs, {"max_attempts": 7}), (dead, {"concurrency_limit": 3})]:
        url = reverse("admin:djqueue_queue_change", args=[queue.pk])
        page = superuser.get(url)
        assert page.status_code == 200, queue.name
        saved = superuser.post(url, _form_of(page, **changed))
        assert saved.status_code == 302, queue.name
    assert Queue.objects.filter(pk=jobs.pk).values_list("max_attempts", flat=True).get() == 7
    assert djqueue.get_queue("a.dead", fresh=True).concurrency_limit == 3
    if connection.vendor != "mysql":  # where a zero date matches IS NULL in a NOT NULL column
        assert not Queue.objects.filter(created_at__isnull=True).exists()  # left as stored


def test_an_alarm_policy_whose_last_firing_cannot_be_read_is_saved_and_keeps_it(superuser):
    """A save wrote back the last firing as shown (none): it erased what was stored."""
    policy = AlarmPolicy.objects.create(name="late", metric=Metric.OLDEST_AGE, threshold=60)
    write_unreadable_time("djqueue_alarmpolicy", "last_fired_at", policy.pk)
    url = reverse("admin:djqueue_alarmpolicy_change", args=[policy.pk])
    assert superuser.post(url, _form_of(superuser.get(url), threshold=90)).status_code == 302
    assert AlarmPolicy.objects.filter(pk=policy.pk, last_fired_at__isnull=False).values_list(
        "threshold", flat=True).get() == 90


def test_a_workflow_whose_steps_times_cannot_be_read_is_shown(superuser):
    from tests import tasks

    handle = djqueue.chain(djqueue.step(tasks.wf_node, 1).named("first"),
                           djqueue.step(tasks.wf_node, 2).named("second")).enqueue()
    write_unreadable_time("djqueue_workflow", "created_at", handle.id)
    for step in WorkflowStep.objects.filter(workflow_id=handle.id):
        write_unreadable_time("djqueue_workflowstep", "started_at", step.pk)
    page = superuser.get(reverse("admin:djqueue_workflow_change", args=[handle.id]))
    assert page.status_code == 200
    assert b"first" in page.content and b"second" in page.content
    assert superuser.get(reverse("admin:djqueue_workflow_changelist")).status_code == 200


@pytest.mark.parametrize("atomic_requests", [False, True])
def test_queue_statistics_whose_start_cannot_be_read_are_listed_without_the_date_bar(
        superuser, monkeypatch, atomic_requests):
    """The statistics list's date bar reads the first and last ``start`` and the years
    (months, days) between: one such row failed the whole list on all three databases
    (on MariaDB the zero date's year reads as None). The list now leaves the bar out
    and says why; a row's name shows such a time as "unreadable", where formatting it
    failed the list too. In a request's transaction (ATOMIC_REQUESTS) as well: what
    fails is the reading of a value the server sent, which aborts no transaction."""
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", atomic_requests)
    queue = djqueue.create_queue("s.jobs")
    now = timezone.now()
    rows = [QueueStat.objects.create(queue=queue, period=Period.MINUTE,
                                     start=now - timedelta(minutes=i)) for i in range(3)]
    changelist = reverse("admin:djqueue_queuestat_changelist")
    before = superuser.get(changelist)
    assert b'class="toplinks"' in before.content  # the bar, while every start reads
    write_unreadable_time("djqueue_queuestat", "start", rows[1].pk)
    for chosen in ({}, {"start__year": now.year},
                   {"start__year": now.year, "start__month": now.month}):
        listed = superuser.get(changelist, chosen)
        assert listed.status_code == 200
        shown = {row.pk for row in listed.context["cl"].result_list}
        # A chosen year leaves out what the database does not place in it: PostgreSQL's
        # 'infinity' and MariaDB's zero date; SQLite compares the text.
        assert shown == {row.pk for row in rows} - (
            {rows[1].pk} if chosen and connection.vendor != "sqlite" else set())
        assert (b'class="toplinks"' in listed.content) == (rows[1].pk not in shown)
        assert (b"The date bar is left out: a row&#x27;s start cannot be read"
                in listed.content) == (rows[1].pk in shown)
    assert str(first_row(QueueStat.objects.filter(pk=rows[1].pk))).endswith("unreadable")


def test_a_periodic_tick_whose_time_cannot_be_read_is_shown(superuser):
    """The tick's page, and the schedules' list: its "last run" is the newest of the
    schedule's tick times, which failed the list when that one could not be read
    (SQLite, PostgreSQL). It shows what the reaper catches up from: none, or on
    MariaDB, where a zero date sorts first, the newest that can be read."""
    ran = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    PeriodicSchedule.objects.create(name="nightly", task_path="tests.tasks.add",
                                    cron="0 3 * * *")
    PeriodicTick.objects.create(name="nightly", tick_at=ran)
    tick = PeriodicTick.objects.create(name="nightly", tick_at=timezone.now())
    write_unreadable_time("djqueue_periodictick", "tick_at", tick.pk)
    page = superuser.get(reverse("admin:djqueue_periodictick_change", args=[tick.pk]))
    assert page.status_code == 200 and b"nightly @ unreadable" in page.content
    changelist = reverse("admin:djqueue_periodicschedule_changelist")
    for order in ({}, {"o": "6"}, {"o": "-6"}):  # 6: "last run"
        listed = superuser.get(changelist, order)
        assert listed.status_code == 200
        assert [row.last_tick for row in listed.context["cl"].result_list] == [
            ran if connection.vendor == "mysql" else None]


def test_an_api_client_and_a_periodic_schedule_whose_times_cannot_be_read_are_saved(
        superuser):
    """The API clients' and the periodic schedules' admins read their rows as Django
    does: a time a hand edit left unreadable failed their lists and pages (SQLite,
    PostgreSQL), a client's page on one token's time too. They read them as the other
    lists and pages do now, and a save leaves such a time as stored."""
    from djqueue.http import access

    client = ApiClient.objects.create(name="svc")
    access.issue_token(client)
    token = ApiToken.objects.get()
    write_unreadable_time("djqueue_apiclient", "created_at", client.pk)
    for column in ("created_at", "expires_at"):
        write_unreadable_time("djqueue_apitoken", column, token.pk)
    schedule = PeriodicSchedule.objects.create(name="nightly", task_path="tests.tasks.add",
                                               cron="0 3 * * *", args=[1, 2])
    for column in ("created_at", "updated_at"):
        write_unreadable_time("djqueue_periodicschedule", column, schedule.pk)

    for model, row, changed in ((ApiClient, client, {"description": "billing"}),
                                (PeriodicSchedule, schedule,
                                 {"cron": "0 4 * * *", "args": "[1, 2]", "kwargs": "{}"})):
        name = model._meta.model_name
        listed = superuser.get(reverse(f"admin:djqueue_{name}_changelist"))
        assert listed.status_code == 200
        assert [r.pk for r in listed.context["cl"].result_list] == [row.pk]
        url = reverse(f"admin:djqueue_{name}_change", args=[row.pk])
        page = superuser.get(url)
        assert page.status_code == 200, name
        saved = superuser.post(url, _form_of(page, **changed))
        assert saved.status_code == 302, (name, saved.context["errors"])
    assert ApiClient.objects.filter(pk=client.pk).values_list("description", flat=True).get(
        ) == "billing"
    assert PeriodicSchedule.objects.filter(pk=schedule.pk).values_list("cron", flat=True).get(
        ) == "0 4 * * *"
    clients = reverse("admin:djqueue_apiclient_changelist")
    for action in ("issue_token", "rotate_tokens", "revoke_tokens"):
        done = superuser.post(clients, {"action": action, "_selected_action": [client.pk]},
                              follow=True)
        assert done.status_code == 200, action
    assert not ApiToken.objects.filter(client=client, revoked_at__isnull=True).exists()
    ran = superuser.post(reverse("admin:djqueue_periodicschedule_changelist"),
                         {"action": "run_now", "_selected_action": [schedule.pk]}, follow=True)
    assert any(str(m).startswith("nightly: enqueued tests.tasks.add (result ")
               for m in ran.context["messages"])
    # The token's expiry, shown empty and left so, is as stored: not "never".
    assert ApiToken.objects.filter(pk=token.pk, expires_at__isnull=False).exists()
    if connection.vendor != "mysql":  # where a zero date matches IS NULL in a NOT NULL column
        assert not ApiClient.objects.filter(created_at__isnull=True).exists()
        assert not ApiToken.objects.filter(created_at__isnull=True).exists()


def test_a_topic_whose_groups_creation_times_cannot_be_read_is_shown(superuser):
    """The topic's page listed its consumer groups as Django reads them: one whose
    creation time a hand edit left unreadable failed it (SQLite, PostgreSQL)."""
    topic = djqueue.create_topic("a.orders")
    djqueue.subscribe("a.orders", "billing")
    write_unreadable_time("djqueue_consumergroup", "created_at",
                          ConsumerGroup.objects.get().pk)
    page = superuser.get(reverse("admin:djqueue_topic_change", args=[topic.pk]))
    assert page.status_code == 200 and b"billing" in page.content


def test_actions_on_rows_whose_times_cannot_be_read_run(superuser):
    """The queues' actions (pause, and purge behind its confirmation page) and the
    consumer groups' replay read the chosen rows whole: one whose creation time a hand
    edit left unreadable failed the action (SQLite, PostgreSQL). They read past it now."""
    queue = djqueue.create_queue("a.jobs")
    djqueue.send_batch("a.jobs", [{"n": i} for i in range(3)])
    write_unreadable_time("djqueue_queue", "created_at", queue.pk)
    changelist = reverse("admin:djqueue_queue_changelist")
    chosen = {"_selected_action": [queue.pk]}
    paused = superuser.post(changelist, {"action": "pause", **chosen}, follow=True)
    assert paused.status_code == 200 and djqueue.get_queue("a.jobs", fresh=True).paused
    asked = superuser.post(changelist, {"action": "purge", **chosen})
    assert asked.status_code == 200 and b"a.jobs" in asked.content
    superuser.post(changelist, {"action": "purge", "confirm": "yes", **chosen})
    assert not Message.objects.filter(queue_id=queue.pk).exists()

    topic = djqueue.create_topic("a.orders")
    djqueue.subscribe("a.orders", "billing")
    djqueue.publish("a.orders", {"n": 1})
    group = ConsumerGroup.objects.get()
    write_unreadable_time("djqueue_consumergroup", "created_at", group.pk)
    write_unreadable_time("djqueue_topic", "created_at", topic.pk)
    replayed = superuser.post(reverse("admin:djqueue_consumergroup_changelist"), {
        "action": "replay", "confirm": "yes", "since": "2000-01-01 00:00:00",
        "_selected_action": [group.pk]}, follow=True)
    assert any(str(m).endswith(": 1 deliveries replayed.")
               for m in replayed.context["messages"])


def test_lists_naming_a_row_whose_times_cannot_be_read_show_its_name(superuser):
    """The message and history lists read each row's queue whole to show its name (a
    prefetch), and the consumer groups' list each group's topic (in the group's name):
    one queue or topic whose creation time a hand edit left unreadable failed the list
    (SQLite, PostgreSQL). They read those rows without their times now."""
    queue = djqueue.create_queue("a.jobs")
    djqueue.send("a.jobs", {"n": 1})
    djqueue.receive("a.jobs")[0].ack()
    djqueue.send("a.jobs", {"n": 2})
    topic = djqueue.create_topic("a.orders")
    djqueue.subscribe("a.orders", "billing")
    write_unreadable_time("djqueue_queue", "created_at", queue.pk)
    write_unreadable_time("djqueue_topic", "created_at", topic.pk)
    for name, shown in (("message", "a.jobs"), ("history", "a.jobs"),
                        ("consumergroup", "a.orders:billing")):
        listed = superuser.get(reverse(f"admin:djqueue_{name}_changelist"))
        assert listed.status_code == 200 and shown.encode() in listed.content, name
