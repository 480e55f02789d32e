"""The admin on the real database, through Django's test client: the dashboard's
queries, the message browser, and every operation's permission check."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import djqueue
from djqueue.models import (
    AlarmPolicy,
    ConsumerGroup,
    History,
    Message,
    Metric,
    Outcome,
    ProcessKind,
    Queue,
    State,
    Worker,
)
from djqueue.monitoring import rollups

pytestmark = pytest.mark.django_db(transaction=True)
DASHBOARD = "admin:djqueue_dashboard_changelist"


def user(name: str, *, staff: bool, perms: tuple[str, ...] = ()) -> Client:
    account = User.objects.create_user(name, password="pw", is_staff=staff)
    account.user_permissions.set(Permission.objects.filter(
        content_type__app_label="djqueue", codename__in=perms))
    client = Client()
    client.force_login(account)
    return client


@pytest.fixture(autouse=True)
def theme() -> None:
    """The demo's theme (the default one asks for LocaleMiddleware, and warns)."""
    call_command("loaddata", "djqueue_admin_theme", verbosity=0)


@pytest.fixture
def world() -> dict[str, object]:
    """Two queues with ready, delayed, in-flight and dead messages, a topic, a worker row."""
    dead = djqueue.create_queue("a.dead")
    jobs = djqueue.create_queue("a.jobs", max_attempts=1, dead_letter_queue=dead, trace=True)
    djqueue.send_batch("a.jobs", [{"n": i} for i in range(5)], group_keys=None)
    djqueue.send("a.jobs", {"n": "later"}, delay=600)
    [failing, held] = djqueue.receive("a.jobs", max_messages=2)
    failing.nack(error="ValueError: boom")
    djqueue.create_topic("a.news")
    djqueue.subscribe("a.news", "readers")
    djqueue.publish_batch("a.news", [{"n": i} for i in range(3)])
    rollups.roll_up(timezone.now() + rollups.SETTLE)
    rollups.sample_depth()
    return {"jobs": jobs, "dead": dead, "failing": failing, "held": held}


def snapshot() -> tuple:
    return (list(Message.objects.order_by("pk").values_list(
                "pk", "queue_id", "state", "visible_at", "attempts")),
            list(Queue.objects.order_by("pk").values_list("pk", "paused")),
            History.objects.count())


def test_dashboard_shows_counts_workers_groups_and_alarms(superuser, world):
    AlarmPolicy.objects.create(name="dead letters", metric=Metric.DEAD_LETTERS, threshold=0)
    from djqueue.monitoring import alarms

    alarms.evaluate()
    for kind, pid in ((ProcessKind.WORKER, 101), (ProcessKind.RECEIVE, 102)):
        Worker.objects.create(id=f"{kind}:host:{pid}", hostname="host", pid=pid,
                              lock_key=f"{kind}{pid}", queues=["a.jobs"], kind=kind,
                              concurrency=4 if kind == ProcessKind.WORKER else 0)
    page = superuser.get(reverse(DASHBOARD)).content.decode()
    assert 'data-queue="a.jobs"' in page and 'data-queue="a.dead"' in page
    assert '<tr data-kind="worker"><td>worker:host:101</td><td>worker</td>' in page
    assert '<tr data-kind="receive"><td>receive:host:102</td><td>waiting receive</td>' in page
    receivers = superuser.get(reverse("admin:djqueue_worker_changelist"),
                              {"kind__exact": "receive"})
    assert [w.pk for w in receivers.context["cl"].result_list] == ["receive:host:102"]
    data = superuser.get(reverse(DASHBOARD)).context["data"]
    rows = {row.queue.name: row for row in data.queues}
    assert (rows["a.jobs"].ready, rows["a.jobs"].scheduled, rows["a.jobs"].in_flight) == (3, 1, 1)
    assert rows["a.dead"].dead == 1
    assert [(g.name, g.pending) for g in data.groups] == [("a.news:readers", 3)]
    assert [a.policy.name for a in data.alarms] == ["dead letters"]
    assert "dead letters" in page


def test_djqueues_own_pages_wear_the_admins_title_and_breadcrumbs(superuser, world):
    """Django 6 writes breadcrumbs as an ordered list and styles that alone; the theme
    names the site in each title. The dashboard and the confirmation page follow."""

    def head_and_crumbs(response) -> tuple[str, str]:
        page = response.content.decode()
        title = re.search(r"<title>(.*?)</title>", page, re.S).group(1).strip()
        crumbs = re.search(r'<(\w+) class="breadcrumbs">', page).group(1)
        return title.rsplit(" | ", 1)[-1], crumbs

    own = head_and_crumbs(superuser.get(reverse("admin:djqueue_queue_changelist")))
    assert head_and_crumbs(superuser.get(reverse(DASHBOARD))) == own
    confirm = superuser.get(reverse("admin:djqueue_dashboard_operation",
                                    args=[world["jobs"].pk, "purge"]))
    assert head_and_crumbs(confirm) == own


def test_dashboard_query_count_does_not_grow_with_queues_messages_or_workers(superuser, world):
    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert superuser.get(reverse(DASHBOARD)).status_code == 200
        return len(queries)

    count_queries()  # warm: django-admin-interface caches the theme after its first read
    before = count_queries()
    for i in range(10):
        djqueue.create_queue(f"b.{i}")
        djqueue.send_batch(f"b.{i}", [{"n": n} for n in range(20)])
        djqueue.create_topic(f"b.t{i}")
        djqueue.subscribe(f"b.t{i}", "g")
        djqueue.publish(f"b.t{i}", {"n": i})
        djqueue.receive(f"b.{i}", owner=f"worker-{i}")
    rollups.roll_up(timezone.now() + rollups.SETTLE)
    rollups.roll_up(timezone.now() + rollups.SETTLE)
    rollups.sample_depth()
    after = count_queries()
    assert after == before
    assert before <= 12  # session and user, and the dashboard's 8 reads


def test_message_browser_filters_by_expression_group_key_and_age(superuser, world):
    djqueue.create_queue("c.ordered", ordered=True)
    djqueue.send("c.ordered", {"x": 1}, group_key="cust-7", headers={"region": "eu", "size": 5})
    djqueue.send("c.ordered", {"x": 2}, group_key="cust-8", headers={"region": "us", "size": 50})
    changelist = reverse("admin:djqueue_message_changelist")

    def ids(query: str) -> set[int]:
        response = superuser.get(f"{changelist}?{query}")
        assert response.status_code == 200
        return {m.pk for m in response.context["cl"].result_list}

    eu = Message.objects.get(group_key="cust-7").pk
    assert ids("where=headers.region+%3D+%27eu%27") == {eu}
    assert ids("where=headers.size+div+10+%3E%3D+5") == {Message.objects.get(group_key="cust-8").pk}
    assert ids("group_key=cust-7") == {eu}
    assert ids(f"queue__id__exact={world['dead'].pk}&state__exact={State.DEAD}") == {
        world["failing"].pk}
    Message.objects.filter(pk=eu).update(sent_at=timezone.now() - timedelta(hours=2))
    assert ids("older_than=3600") == {eu}
    response = superuser.get(f"{changelist}?where=priority+%3E%3E%3E+1")
    assert list(response.context["cl"].result_list) == []
    assert "Expression not applied" in response.content.decode()


def test_expressions_the_database_cannot_evaluate_are_a_message_not_a_500(superuser, world):
    """A staff user's filter is compiled within its budget and checked on the database:
    too complex, or operands of the wrong type (PostgreSQL), show why on the page."""
    from urllib.parse import quote

    changelist = reverse("admin:djqueue_message_changelist")
    djqueue.send(world["jobs"], {"n": 1}, headers={"x": 2})
    expressions = ["priority" + " ^ 1" * 300, "~" * 39 + "priority = 0", "headers.x | 1.5 > 0",
                   " xor ".join(["priority = 1"] * 100)]
    for expression in expressions:
        started = time.monotonic()
        response = superuser.get(f"{changelist}?where={quote(expression)}")
        assert response.status_code == 200
        assert time.monotonic() - started < 2.0
        page = response.content.decode()
        if expression != "headers.x | 1.5 > 0" or connection.vendor == "postgresql":
            assert "Expression not applied" in page, expression
            assert list(response.context["cl"].result_list) == []


def test_the_message_lists_last_error_is_the_failures_exception(superuser, world):
    """Of a traceback, the list's column shows the exception line, not the traceback's
    tail (it showed its last 80 characters: the end of the raise line and the exception)."""
    frame = '  File "shop/tasks.py", line 12, in charge\n    raise KeyError(sku_' + "x" * 60
    Message.objects.filter(pk=world["failing"].pk).update(errors=[{
        "attempt": 1, "error": f"Traceback (most recent call last):\n{frame})\n"
                               "KeyError: 'sku-42'\n"}])
    changelist = reverse("admin:djqueue_message_changelist")
    page = superuser.get(f"{changelist}?queue__id__exact={world['dead'].pk}").content.decode()
    [cell] = re.findall(r'<td class="field-short_error">(.*?)</td>', page)
    assert cell == "KeyError: &#x27;sku-42&#x27;", cell


def test_message_detail_shows_payload_headers_errors_and_trace(superuser, world):
    failing = world["failing"]
    page = superuser.get(reverse("admin:djqueue_message_change", args=[failing.pk])).content.decode()
    assert "ValueError: boom" in page
    assert "&quot;n&quot;: 0" in page or '"n": 0' in page
    for event in ("sent", "claimed", "nacked", "dead_lettered"):
        assert f"<td>{event}</td>" in page


def test_a_queues_page_says_what_handler_a_worker_runs_for_it(superuser, settings):
    settings.DJQUEUE = {**settings.DJQUEUE, "HANDLERS": {
        **settings.DJQUEUE.get("HANDLERS", {}),
        "adm.set": {"handler": "tests.handlers.record_windowed", "exactly_once": False},
        "adm.broken": {"handler": "tests.handlers.record_batch", "batch": 0}}}
    said = {}
    for name in ("t.batched", "t.abatched", "t.windowed", "adm.set", "adm.broken", "adm.none"):
        queue = djqueue.create_queue(name)
        response = superuser.get(reverse("admin:djqueue_queue_change", args=[queue.pk]))
        assert response.status_code == 200
        said[name] = re.search(r'field-handler.*?<div class="readonly">(.*?)</div>',
                               response.content.decode(), re.S).group(1)
    assert said["t.batched"] == "tests.handlers.record_batch; lists of up to 50 messages a run"
    assert said["t.abatched"] == ("tests.handlers.record_batch_async (async); lists of up to "
                                  "10 messages a run")
    assert said["t.windowed"] == ("tests.handlers.record_windowed; lists of up to 20 messages "
                                  "a run, waiting up to 4 s to fill")
    assert said["adm.set"] == ("tests.handlers.record_windowed; not exactly once, whatever "
                               "the queue says")
    assert "batch must be" in said["adm.broken"]
    assert said["adm.none"].startswith("No handler for queue &#x27;adm.none&#x27;")


def test_delete_from_the_browser_goes_through_the_api(superuser, world):
    target = Message.objects.filter(state=State.READY).first()
    changelist = reverse("admin:djqueue_message_changelist")
    superuser.post(changelist, {"action": "delete_selected", ACTION_CHECKBOX_NAME: [target.pk],
                                "post": "yes"})
    assert not Message.objects.filter(pk=target.pk).exists()
    assert History.objects.get(pk=target.pk).outcome == Outcome.DELETED


def test_actions_work_for_a_superuser(superuser, world):
    jobs, dead = world["jobs"], world["dead"]
    op = lambda q, name: reverse("admin:djqueue_dashboard_operation", args=[q.pk, name])  # noqa: E731
    superuser.post(op(jobs, "pause"))
    assert Queue.objects.get(pk=jobs.pk).paused
    superuser.post(op(jobs, "resume"))
    assert not Queue.objects.get(pk=jobs.pk).paused
    confirm = superuser.get(op(dead, "redrive"))
    assert b"Yes, redrive" in confirm.content
    superuser.post(op(dead, "redrive"), {"confirm": "yes"})
    assert Message.objects.get(pk=world["failing"].pk).state == State.READY
    changelist = reverse("admin:djqueue_message_changelist")
    later = Message.objects.get(state=State.SCHEDULED)
    superuser.post(changelist, {"action": "retry_now", ACTION_CHECKBOX_NAME: [later.pk]})
    assert Message.objects.get(pk=later.pk).state == State.READY
    superuser.post(changelist, {"action": "change_visibility", ACTION_CHECKBOX_NAME: [later.pk],
                                "confirm": "yes", "seconds": "120"})
    moved = Message.objects.get(pk=later.pk)
    assert moved.state == State.SCHEDULED and moved.visible_at > timezone.now() + timedelta(
        seconds=100)
    group = ConsumerGroup.objects.get(name="readers")
    news = Message.objects.filter(queue__name__startswith="a.news")
    unread = set(news.values_list("pk", flat=True))
    superuser.post(reverse("admin:djqueue_consumergroup_changelist"), {
        "action": "replay", ACTION_CHECKBOX_NAME: [group.pk], "confirm": "yes",
        "since": (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")})
    replayed = set(news.values_list("pk", flat=True))  # the unread dropped, all 3 delivered anew
    assert len(replayed) == 3 and not replayed & unread
    superuser.post(op(jobs, "purge"), {"confirm": "yes"})
    assert set(Message.objects.filter(queue=jobs).values_list("state", flat=True)) == {
        State.CLAIMED}


def dashboard_op(name: str, confirm: bool) -> Callable[[Client, dict], object]:
    def post(client: Client, world: dict) -> object:
        queue = world["dead"] if name == "redrive" else world["jobs"]
        data = {"confirm": "yes"} if confirm else {}
        return client.post(reverse("admin:djqueue_dashboard_operation", args=[queue.pk, name]),
                           data)
    return post


def admin_action(model: str, action: str, pick: Callable[[dict], int],
                 **extra: str) -> Callable[[Client, dict], object]:
    def post(client: Client, world: dict) -> object:
        return client.post(reverse(f"admin:djqueue_{model}_changelist"), {
            "action": action, ACTION_CHECKBOX_NAME: [pick(world)], "confirm": "yes",
            "post": "yes", **extra})
    post.action = action
    return post


def _readers(world: dict) -> int:
    return ConsumerGroup.objects.get(name="readers").pk


def _scheduled(world: dict) -> int:
    return Message.objects.get(state=State.SCHEDULED).pk


OPERATIONS = {
    "dashboard pause": (dashboard_op("pause", False), "pause_queue"),
    "dashboard resume": (dashboard_op("resume", False), "pause_queue"),
    "dashboard purge": (dashboard_op("purge", True), "purge_queue"),
    "dashboard redrive": (dashboard_op("redrive", True), "redrive_queue"),
    "queue pause": (admin_action("queue", "pause", lambda w: w["jobs"].pk), "pause_queue"),
    "queue resume": (admin_action("queue", "resume", lambda w: w["jobs"].pk), "pause_queue"),
    "queue purge": (admin_action("queue", "purge", lambda w: w["jobs"].pk), "purge_queue"),
    "queue redrive": (admin_action("queue", "redrive", lambda w: w["dead"].pk), "redrive_queue"),
    "message retry now": (admin_action("message", "retry_now", _scheduled), "retry_message"),
    "message redrive": (admin_action("message", "redrive_selected", lambda w: w["failing"].pk),
                        "redrive_queue"),
    "message visibility": (admin_action("message", "change_visibility", _scheduled,
                                        seconds="0"), "change_visibility"),
    "message delete": (admin_action("message", "delete_selected", _scheduled), "delete_message"),
    "group replay": (admin_action("consumergroup", "replay", _readers,
                                  since="2000-01-01 00:00:00"), "replay_group"),
}
VIEWING = ("view_queue", "view_message", "view_consumergroup")


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_every_operation_is_refused_without_staff_or_permission(world, name):
    post, permission = OPERATIONS[name]
    if name.endswith("resume"):
        Queue.objects.filter(pk=world["jobs"].pk).update(paused=True)
    before = snapshot()
    outsider = user("outsider", staff=False, perms=(*VIEWING, permission))
    response = post(outsider, world)
    assert response.status_code == 302 and "/login/" in response["Location"]
    viewer = user("viewer", staff=True, perms=VIEWING)
    response = post(viewer, world)
    if name.startswith("dashboard"):
        assert response.status_code == 403
    else:  # the admin neither offers nor runs the action: the list comes back, unchanged
        assert response.status_code == 200
        form = response.context["action_form"]  # None when the user may run no action at all
        offered = [c for c, _ in form.fields["action"].choices] if form is not None else []
        assert post.action not in offered
    assert snapshot() == before
    allowed = user("allowed", staff=True, perms=(*VIEWING, permission))
    post(allowed, world)
    assert snapshot() != before  # the same request with the permission does change something


def test_operations_need_post_with_a_csrf_token(world):
    User.objects.create_superuser("csrf", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.login(username="csrf", password="pw")
    url = reverse("admin:djqueue_dashboard_operation", args=[world["jobs"].pk, "pause"])
    assert client.get(url).status_code == 405
    assert client.post(url).status_code == 403
    assert not Queue.objects.get(pk=world["jobs"].pk).paused


def test_bad_input_to_operations_is_refused(superuser, world):
    assert superuser.post(reverse("admin:djqueue_dashboard_operation",
                                  args=[world["jobs"].pk, "drop"])).status_code == 404
    assert superuser.post(reverse("admin:djqueue_dashboard_operation",
                                  args=[999_999, "pause"])).status_code == 404
    before = snapshot()
    response = superuser.post(reverse("admin:djqueue_message_changelist"), {
        "action": "change_visibility", ACTION_CHECKBOX_NAME: [_scheduled(world)],
        "confirm": "yes", "seconds": "-5"})
    assert response.status_code == 200 and b"greater than or equal to 0" in response.content
    assert snapshot() == before


def test_dashboard_shows_what_a_live_worker_holds(superuser, spawn):
    from djqueue.models import Worker
    from tests.conftest import wait_until

    djqueue.create_queue("t.slow", visibility_timeout=300)
    sent = djqueue.send_batch("t.slow", [{"n": i, "sleep": 30} for i in range(1, 3)])
    worker = spawn("djqueue_worker", "t.slow", "-c", "2", "-b", "2", "--shutdown-grace", "0")
    row = wait_until(lambda: Worker.objects.filter(holding=2).first(), 30,
                     "the worker's heartbeat to report 2 held messages")
    assert sorted(row.held_ids) == sorted(m.pk for m in sent)
    page = superuser.get(reverse(DASHBOARD)).content.decode()
    assert f"<td>{row.pk}</td>" in page
    for message in sent:
        assert reverse("admin:djqueue_message_change", args=[message.pk]) in page
    worker.stop()


def test_workflow_operations_need_post_and_their_permission():
    from djqueue.models import Workflow, WorkflowState
    from tests import tasks

    handle = djqueue.chain(djqueue.step(tasks.wf_node, 1), djqueue.step(tasks.wf_node, 2)).enqueue()
    cancel = reverse("admin:djqueue_workflow_cancel", args=[handle.id])
    retry = reverse("admin:djqueue_workflow_retry", args=[handle.id])
    viewer = user("viewer", staff=True, perms=("view_workflow",))
    page = viewer.get(reverse("admin:djqueue_workflow_change", args=[handle.id]))
    assert page.status_code == 200 and b"djqueue-workflow-graph" in page.content
    assert b"djqueue-workflow-cancel" not in page.content  # not offered without the permission
    assert viewer.post(cancel).status_code == 403
    assert user("outsider", staff=False).post(cancel).status_code == 302  # to the login page
    assert Workflow.objects.get(pk=handle.id).state == WorkflowState.RUNNING
    operator = user("operator", staff=True,
                    perms=("view_workflow", "cancel_workflow", "retry_workflow"))
    assert b"djqueue-workflow-cancel" in operator.get(
        reverse("admin:djqueue_workflow_change", args=[handle.id])).content
    assert operator.get(cancel).status_code == 405
    assert operator.post(cancel).status_code == 302
    assert Workflow.objects.get(pk=handle.id).state == WorkflowState.CANCELLED
    assert Workflow.objects.get(pk=handle.id).steps_left == 0  # its queued step withdrawn
    assert not Message.objects.exists()
    response = operator.post(retry, follow=True)
    assert b"2 step(s) will run again" in response.content
    assert Workflow.objects.get(pk=handle.id).state == WorkflowState.RUNNING
    assert operator.post(retry, follow=True).status_code == 200  # refused: it runs
    assert operator.post(reverse("admin:djqueue_workflow_retry", args=[10**9])).status_code == 404


def test_a_large_workflows_picture_stays_small(superuser):
    from tests import tasks

    handle = djqueue.chord([djqueue.step(tasks.wf_add, i, i) for i in range(2000)],
                           djqueue.step(tasks.wf_total)).enqueue()
    started = time.monotonic()
    page = superuser.get(reverse("admin:djqueue_workflow_change", args=[handle.id]))
    took = time.monotonic() - started
    content = page.content.decode()
    assert "data-steps='2001'" in content and "data-boxes='2'" in content
    assert "data-counts='2000 ready'" in content
    assert content.count("<tr data-state=") == 200
    print(f"the page of a 2,001-step workflow: {len(content) // 1024} KiB in {took:.2f} s")
