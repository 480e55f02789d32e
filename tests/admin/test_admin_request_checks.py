"""What an admin request carries, checked before it reaches a query or a page
(djqueue.admin.request_checks): a filter's value, the rows an action names, a row's id
in a page's address, JSON typed into a form. Each case here was a server error (500) on
at least one database before, as the cases say; now each is a message on the page that
says which value was wrong and why, and nothing changes."""

from __future__ import annotations

import html

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

import djqueue
from djqueue.models import Message, PeriodicSchedule, Queue

pytestmark = pytest.mark.django_db(transaction=True)
PAST_64_BITS = str(2**70)


def shown(client: Client, response) -> str:
    """The page a response leads to, its text unescaped (messages included)."""
    while response.status_code == 302:
        response = client.get(response["Location"])
    assert response.status_code == 200
    return html.unescape(response.content.decode())


@pytest.mark.parametrize(("model", "parameter", "value", "said"), [
    # SQLite's driver: OverflowError (a relation's filter compares with the queue's id)
    ("message", "queue", PAST_64_BITS, "past the 64-bit whole numbers queue.id holds"),
    ("history", "queue", PAST_64_BITS, "past the 64-bit whole numbers queue.id holds"),
    ("queuestat", "queue__id__in", f"1,{PAST_64_BITS}", "queue.id holds"),
    # PostgreSQL: its text holds no NUL
    ("message", "group_key", "a\x00b", "holds a NUL character"),
    ("history", "group_key", "\x00", "holds a NUL character"),
    ("queue", "name", "jobs\x00", "holds a NUL character"),
    ("worker", "kind", "\x00", "holds a NUL character"),
    ("taskrecord", "queue_name", "default\x00", "holds a NUL character"),
    ("workflow", "name", "\x00", "holds a NUL character"),
    # Django's date links: OverflowError from int() past a C long, ValueError past 9999
    ("queuestat", "start__year", "9" * 30, "is not a year from 1 to 9998"),
    ("queuestat", "start__year", "9999", "is not a year from 1 to 9998"),
    ("queuestat", "start__month", "x", "is not a month from 1 to 12"),
])
def test_a_filter_no_query_can_take_is_not_applied_and_says_why(superuser, model, parameter,
                                                                value, said):
    djqueue.create_queue("checks.jobs")
    djqueue.send("checks.jobs", {"n": 1})
    response = superuser.get(reverse(f"admin:djqueue_{model}_changelist"), {parameter: value})
    assert response.status_code == 302 and response["Location"].endswith("?e=1")
    page = shown(superuser, response)
    assert f"Filter {parameter!r} not applied: the value" in page and said in page, page[-3000:]


def test_a_filter_value_in_range_is_applied_as_before(superuser):
    queue = djqueue.create_queue("checks.jobs")
    djqueue.send("checks.jobs", {"n": 1}, group_key="7")
    changelist = reverse("admin:djqueue_message_changelist")
    for query in ({"queue": str(queue.pk)}, {"group_key": "7"}, {"queue": str(2**63 - 1)}):
        response = superuser.get(changelist, query)
        assert response.status_code == 200, query
        assert "not applied" not in response.content.decode()
    statistics = reverse("admin:djqueue_queuestat_changelist")
    for query in ({"start__year": "2026"}, {"start__year": "2026", "start__month": "12",
                                            "start__day": "31"}):
        response = superuser.get(statistics, query)
        assert response.status_code == 200, query
        assert "not applied" not in response.content.decode()


def test_the_dashboard_given_a_queue_name_with_a_nul_shows_no_queue(superuser):
    djqueue.create_queue("checks.jobs")
    response = superuser.get(reverse("admin:djqueue_dashboard_changelist"),
                             {"queue": "checks.jobs\x00"})
    assert response.status_code == 200  # PostgreSQL: a 500
    assert "checks.jobs" in response.content.decode()


def test_a_page_whose_row_id_holds_a_nul_is_a_row_not_found(superuser):
    djqueue.create_queue("checks.jobs")
    response = superuser.get(reverse("admin:djqueue_worker_change", args=["w\x00"]))
    assert response.status_code == 302  # PostgreSQL: a 500
    assert "doesn’t exist" in shown(superuser, response)  # noqa: RUF001 (Django writes it so)


@pytest.mark.parametrize(("selected", "said"), [
    (["abc"], "'abc' is not the id of a queue"),  # every database: Django's ValueError
    ([PAST_64_BITS], "past the 64-bit whole numbers an id holds"),
    (["1\x00"], "a selected id holds a NUL character"),
    (["9" * 5000], "is not the id of a queue"),
])
def test_an_action_on_ids_that_are_no_rows_ids_changes_nothing_and_says_why(superuser,
                                                                            selected, said):
    queue = djqueue.create_queue("checks.jobs")
    response = superuser.post(reverse("admin:djqueue_queue_changelist"), {
        "action": "pause", "_selected_action": [str(queue.pk), *selected], "index": "0"})
    page = shown(superuser, response)
    assert "No action taken: " in page and said in page
    assert not Queue.objects.get(pk=queue.pk).paused


def test_a_message_action_with_one_bad_id_deletes_nothing(superuser):
    djqueue.create_queue("checks.jobs")
    sent = djqueue.send("checks.jobs", {"n": 1})
    response = superuser.post(reverse("admin:djqueue_message_changelist"), {
        "action": "delete_selected", "_selected_action": [str(sent.id), "x"], "index": "0",
        "post": "yes"})
    page = shown(superuser, response)
    assert "No action taken: 'x' is not the id of a message" in page
    assert Message.objects.filter(pk=sent.id).exists()


GOOD_SCHEDULE = {"name": "nightly", "task_path": "tests.tasks.add", "cron": "30 2 * * *",
                 "time_zone": "", "args": "[2, 3]", "kwargs": "{}", "enabled": "on"}


@pytest.mark.parametrize(("field", "typed", "said"), [
    # every database: Python's int refuses past 4,300 digits, Django let it through
    ("args", "[" + "9" * 5000 + "]", "Enter valid JSON: Exceeds the limit (4300 digits)"),
    ("kwargs", '{"a": ' + "9" * 5000 + "}", "Enter valid JSON: Exceeds the limit"),
    # every database: the page could not write the lone surrogate back as UTF-8
    ("args", '["\\udcff"]', "This JSON is not valid Unicode text"),
    ("kwargs", '{"\\ud800": 1}', "This JSON is not valid Unicode text"),
    # PostgreSQL: jsonb holds no NUL
    ("args", '["a\\u0000b"]', "This JSON contains a NUL character"),
])
def test_a_json_field_refuses_what_no_database_stores_and_shows_it_as_typed(superuser, field,
                                                                           typed, said):
    response = superuser.post(reverse("admin:djqueue_periodicschedule_add"),
                              {**GOOD_SCHEDULE, field: typed})
    assert response.status_code == 200, "the form was saved"
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field] and said in errors[field][0], errors
    assert html.escape(typed) in response.content.decode()  # shown back as typed
    assert not PeriodicSchedule.objects.exists()


def test_a_queues_backoff_steps_past_4300_digits_are_a_form_error(superuser):
    response = superuser.post(reverse("admin:djqueue_queue_add"), {
        "name": "checks.jobs", "visibility_timeout": "30", "max_attempts": "5",
        "backoff": "[" + "9" * 5000 + "]", "retry_jitter": "0", "retention": "0",
        "max_payload_bytes": "262144", "rate_burst": "1", "group_rate_burst": "1",
        "dedup_window": "300"})
    assert response.status_code == 200, "the form was saved"
    errors = response.context["adminform"].form.errors
    assert "Enter valid JSON: Exceeds the limit" in errors["backoff"][0], errors
    assert not Queue.objects.filter(name="checks.jobs").exists()


def test_no_djqueue_list_or_page_is_a_server_error_for_such_values(superuser):
    """Every djqueue list, filtered on each of its fields by a NUL and by a number past
    64 bits, and each page's address holding a NUL: a page or a redirect, never a 500."""
    djqueue.create_queue("checks.jobs")
    djqueue.send("checks.jobs", {"n": 1})
    superuser.raise_request_exception = False
    answers: dict[str, int] = {}
    for model in {m for m in admin.site._registry if m._meta.app_label == "djqueue"}:
        name = model._meta.model_name
        changelist = reverse(f"admin:djqueue_{name}_changelist")
        for field in model._meta.concrete_fields:
            for value in ("\x00", PAST_64_BITS):
                response = superuser.get(changelist, {field.name: value})
                answers[f"{name}?{field.name}={value!r}"] = response.status_code
        if name != "dashboard":
            response = superuser.get(reverse(f"admin:djqueue_{name}_change", args=["1\x00"]))
            answers[f"{name} page of '1\\x00'"] = response.status_code
    assert len(answers) > 200
    assert {at: code for at, code in answers.items() if code not in (200, 302)} == {}


def test_every_lists_filters_given_odd_values_answer_without_a_server_error(superuser):
    """Each djqueue list, each of its filters and date links, given a number past a C
    long, a NUL and text: the list (filtered or not, with a message), never a 500."""
    djqueue.create_queue("checks.jobs")
    djqueue.send("checks.jobs", {"n": 1})
    superuser.raise_request_exception = False
    failed, requests = [], 0
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label != "djqueue" or model._meta.proxy:
            continue
        changelist = reverse(f"admin:djqueue_{model._meta.model_name}_changelist")
        parameters = []
        for list_filter in model_admin.list_filter:
            name = list_filter if isinstance(list_filter, str) else getattr(
                list_filter, "parameter_name", None)
            parameters += [name, f"{name}__exact", f"{name}__id__exact"] if name else []
        if model_admin.date_hierarchy:
            parameters += [f"{model_admin.date_hierarchy}__{part}"
                           for part in ("year", "month", "day")]
        for parameter in parameters:
            for value in ("9" * 30, "\x00", "x"):
                response = superuser.get(changelist, {parameter: value})
                requests += 1
                if response.status_code >= 500:
                    failed.append(f"{changelist}?{parameter}={value!r}")
    assert requests > 100 and not failed, (requests, failed)
