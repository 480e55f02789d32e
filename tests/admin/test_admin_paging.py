"""The admin's lists of rows djqueue writes count at most a cap of rows
(djqueue.admin.paging): no page of them runs an unbounded COUNT, whatever the table
holds, and past the cap the list says so instead of showing a count it did not make."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import djqueue
from djqueue.admin.browser import MessageAdmin
from djqueue.admin.paging import CappedPaginator
from djqueue.admin.records import HistoryAdmin, reaches_other_rows
from djqueue.admin.workflows import WorkflowAdmin
from djqueue.models import History, Message, Outcome, Workflow

pytestmark = pytest.mark.django_db(transaction=True)
CAP = 5


@pytest.fixture
def admin_client(monkeypatch: pytest.MonkeyPatch) -> Client:
    call_command("loaddata", "djqueue_admin_theme", verbosity=0)
    monkeypatch.setattr(CappedPaginator, "CAP", CAP)
    User.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(User.objects.get(username="root"))
    return client


def finished(count: int) -> None:
    queue = djqueue.create_queue("paging.jobs", exist_ok=True)
    now = timezone.now()
    start = History.objects.count()
    History.objects.bulk_create(
        History(id=start + i + 1, queue=queue, outcome=Outcome.ACKED, attempts=1, size=10,
                sent_at=now, claimed_at=now, finished_at=now) for i in range(count))


def counts(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]


def footer(html: str) -> str:
    """The pagination footer's text, spaces collapsed."""
    nav = re.search(r'<nav class="paginator".*?</nav>', html, re.S)
    assert nav is not None, html
    return " ".join(re.sub(r"<[^>]+>", " ", nav.group(0)).split())


def test_a_list_past_the_cap_counts_only_up_to_it_and_says_so(admin_client):
    finished(CAP + 3)
    changelist = reverse("admin:djqueue_history_changelist")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(changelist)
    assert response.status_code == 200
    [count] = counts(queries)  # one count: the unfiltered total is not counted again
    assert "LIMIT" in count.upper(), count
    assert f"more than {CAP} history" in footer(response.content.decode())
    assert len(response.context["cl"].result_list) == CAP + 3  # every row on the one page


def test_a_filtered_list_is_counted_the_same_way(admin_client):
    finished(CAP + 1)
    changelist = reverse("admin:djqueue_history_changelist")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(f"{changelist}?outcome__exact={Outcome.ACKED.value}")
    [count] = counts(queries)
    assert "LIMIT" in count.upper() and "outcome" in count, count
    assert f"more than {CAP} history" in footer(response.content.decode())


def test_a_list_within_the_cap_shows_its_exact_count(admin_client):
    finished(CAP - 1)
    response = admin_client.get(reverse("admin:djqueue_history_changelist"))
    assert response.status_code == 200
    text = footer(response.content.decode())
    assert f"{CAP - 1} history" in text and "more than" not in text
    finished(1)  # exactly the cap: still an exact count
    text = footer(admin_client.get(reverse("admin:djqueue_history_changelist")).content.decode())
    assert f"{CAP} history" in text and "more than" not in text


def test_pages_reach_every_counted_row(admin_client, monkeypatch):
    monkeypatch.setattr(HistoryAdmin, "list_per_page", 2)
    finished(CAP + 1)
    changelist = reverse("admin:djqueue_history_changelist")
    seen = []
    for page in (1, 2, 3):
        response = admin_client.get(f"{changelist}?p={page}")
        assert response.status_code == 200
        seen += [row.pk for row in response.context["cl"].result_list]
    assert sorted(seen) == list(range(1, CAP + 2))
    assert f"more than {CAP} history" in footer(response.content.decode())


@pytest.mark.parametrize("name", ["message", "history", "taskrecord", "traceevent",
                                  "workflow", "queuestat", "periodictick", "worker"])
def test_every_list_of_rows_djqueue_writes_is_capped(admin_client, name):
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(reverse(f"admin:djqueue_{name}_changelist"))
    assert response.status_code == 200
    assert response.context["cl"].paginator.__class__ is CappedPaginator
    assert all("LIMIT" in sql.upper() for sql in counts(queries)), counts(queries)


def test_past_the_cap_select_all_is_not_offered_nor_done(admin_client):
    djqueue.create_queue("paging.sent")
    djqueue.send_batch("paging.sent", list(range(CAP + 3)))
    changelist = reverse("admin:djqueue_message_changelist")
    html = admin_client.get(changelist).content.decode()
    assert f"More than {CAP} match: narrow the list" in html
    assert 'class="question' not in html  # the link that would select them all
    # Asked anyway (a crafted POST): refused with the reason, nothing changed.
    with CaptureQueriesContext(connection) as queries:
        refused = admin_client.post(changelist, {
            "action": "delete_selected", "select_across": "1", "index": "0",
            "_selected_action": [str(Message.objects.order_by("pk").first().pk)]},
            follow=True)
    assert f"More than {CAP} rows match" in refused.content.decode()
    assert Message.objects.count() == CAP + 3
    assert all("LIMIT" in sql.upper() for sql in counts(queries))


def test_within_the_cap_select_all_acts_on_every_row(admin_client, monkeypatch):
    monkeypatch.setattr(HistoryAdmin, "list_per_page", 2)
    finished(CAP)
    changelist = reverse("admin:djqueue_history_changelist")
    html = admin_client.get(changelist).content.decode()
    assert f"Select all {CAP} history" in html and "narrow the list" not in html
    chosen = {"action": "delete_selected", "select_across": "1", "index": "0",
              "_selected_action": ["1"]}
    asked = admin_client.post(changelist, chosen)
    assert asked.status_code == 200 and "Are you sure" in asked.content.decode()
    assert admin_client.post(changelist, {**chosen, "post": "yes"}).status_code == 302
    assert History.objects.count() == 0  # every row, not only the page's two


def search_note(html: str) -> str:
    """The search bar's result count, spaces collapsed."""
    bar = re.search(r'<form id="changelist-search".*?</form>', html, re.S)
    assert bar is not None, html
    note = re.search(r'<span class="small quiet">(.*?)</span>', bar.group(0), re.S)
    assert note is not None, bar.group(0)
    return " ".join(re.sub(r"<[^>]+>", " ", note.group(1)).split())


def test_a_search_past_the_cap_says_more_than_the_cap(admin_client):
    djqueue.create_queue("paging.sent")
    djqueue.send_batch("paging.sent", list(range(CAP + 2)), group_key="many")
    djqueue.send_batch("paging.sent", list(range(2)), group_key="few")
    changelist = reverse("admin:djqueue_message_changelist")
    past = admin_client.get(f"{changelist}?q=many").content.decode()
    assert search_note(past) == f"more than {CAP} results ( Show all )"
    assert f"{CAP + 1} results" not in past  # the probe row is never shown as a count
    within = admin_client.get(f"{changelist}?q=few").content.decode()
    assert search_note(within) == "2 results ( Show all )"
    assert 'id="searchbar"' in within and 'value="few"' in within  # Django's bar around it


def confirmation_objects(html: str) -> list[str]:
    """The delete confirmation's list of rows, each item's text, spaces collapsed."""
    listed = re.search(r"<h2>Objects</h2>(.*?)<form", html, re.S)
    assert listed is not None, html
    return [" ".join(re.sub(r"<[^>]+>", " ", item).split())
            for item in re.findall(r"<li>(.*?)</li>", listed.group(1), re.S)]


def test_a_delete_of_many_rows_names_some_and_counts_the_rest(admin_client, monkeypatch):
    monkeypatch.setattr(MessageAdmin, "LISTED_DELETES", 3)
    djqueue.create_queue("paging.deleted")
    sent = djqueue.send_batch("paging.deleted", list(range(7)))
    changelist = reverse("admin:djqueue_message_changelist")
    chosen = {"action": "delete_selected", "index": "0",
              "_selected_action": [str(m.pk) for m in sent]}
    html = admin_client.post(changelist, chosen).content.decode()
    named = confirmation_objects(html)
    assert named[-1] == "and 4 more messages" and len(named) == 4
    assert all(item.startswith("Message: #") for item in named[:3]), named
    summary = re.search(r"<h2>Summary</h2>(.*?)</ul>", html, re.S)
    assert summary is not None and "Messages: 7" in " ".join(
        re.sub(r"<[^>]+>", " ", summary.group(1)).split())
    assert html.count('name="_selected_action"') == 7  # the POST still names every row
    assert admin_client.post(changelist, {**chosen, "post": "yes"}).status_code == 302
    assert not Message.objects.filter(queue__name="paging.deleted").exists()


def test_a_delete_that_reaches_other_rows_lists_them_all(admin_client, monkeypatch):
    """A workflow takes its steps with it: Django's own listing, every row named."""
    monkeypatch.setattr(WorkflowAdmin, "LISTED_DELETES", 1)
    assert reaches_other_rows(Workflow)
    assert not reaches_other_rows(Message) and not reaches_other_rows(History)
    Workflow.objects.bulk_create(
        Workflow(name=f"flow {i}", token="t", steps_total=0, steps_left=0,
                 created_at=timezone.now()) for i in range(3))
    workflows = Workflow.objects.all()  # MySQL's bulk insert returns no ids
    changelist = reverse("admin:djqueue_workflow_changelist")
    html = admin_client.post(changelist, {
        "action": "delete_selected", "index": "0",
        "_selected_action": [str(w.pk) for w in workflows]}).content.decode()
    named = confirmation_objects(html)
    assert len(named) == 3 and not any("more" in item for item in named), named
