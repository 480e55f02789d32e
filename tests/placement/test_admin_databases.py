"""The admin with a queue on a second database: its lists, pages, actions and the
dashboard show and work on the database chosen, and nothing lands on the home one."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

import djqueue
from djqueue.models import Message, Queue, State
from djqueue.monitoring import rollups
from djqueue.storage import dialects
from tests.placement.conftest import PLACEMENT_DATABASES, djqueue_rows

pytestmark = PLACEMENT_DATABASES


@pytest.fixture
def superuser() -> Client:
    call_command("loaddata", "djqueue_admin_theme", verbosity=0)
    User.objects.create_superuser("root", password="pw")
    client = Client()
    client.login(username="root", password="pw")
    return client


def test_lists_and_pages_show_the_chosen_database(superuser):
    djqueue.create_queue("home.q")
    djqueue.send("home.q", {"where": "home"})
    djqueue.create_queue("placed.admin")
    placed = djqueue.send("placed.admin", {"where": "placed-only"})
    messages = reverse("admin:djqueue_message_changelist")
    home_page = superuser.get(messages).content.decode()
    assert "home.q" in home_page and "placed.admin" not in home_page
    assert 'data-database="queues"' not in home_page
    page = superuser.get(messages, {"database": "queues"}).content.decode()
    assert "placed.admin" in page and "home.q" not in page
    assert "?database=queues" in page  # the filter offers both databases
    detail = superuser.get(reverse("admin:djqueue_message_change", args=[placed.pk]),
                           {"database": "queues"})
    assert detail.status_code == 200 and "placed-only" in detail.content.decode()
    queue = Queue.objects.using("queues").get(name="placed.admin")
    change = superuser.get(reverse("admin:djqueue_queue_change", args=[queue.pk]),
                           {"database": "queues"})
    assert change.status_code == 200 and "placed.admin" in change.content.decode()


def test_an_action_and_an_edit_work_on_the_chosen_database(superuser):
    djqueue.create_queue("placed.ops")
    sent = djqueue.send("placed.ops", {"n": 1}, delay=3600)
    url = reverse("admin:djqueue_message_changelist") + "?database=queues"
    response = superuser.post(url, {"action": "retry_now", ACTION_CHECKBOX_NAME: [sent.pk]})
    assert response.status_code == 302
    assert Message.objects.using("queues").get(pk=sent.pk).state == State.READY
    queue = Queue.objects.using("queues").get(name="placed.ops")
    form = superuser.get(reverse("admin:djqueue_queue_change", args=[queue.pk]),
                         {"database": "queues"}).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None}
    data.update({"name": "placed.ops", "max_attempts": 7, "backoff": "[1]",
                 "dead_letter_queue": ""})
    response = superuser.post(
        reverse("admin:djqueue_queue_change", args=[queue.pk]) + "?database=queues", data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Queue.objects.using("queues").get(name="placed.ops").max_attempts == 7
    assert not djqueue_rows("default").get("djqueue_queue")


def test_the_dashboard_shows_one_database_and_its_buttons_act_there(superuser):
    djqueue.create_queue("home.q")
    djqueue.create_queue("placed.dash")
    djqueue.send_batch("placed.dash", [{"n": i} for i in range(3)])
    with dialects.using("queues"):
        rollups.sample_depth()
    dashboard = reverse("admin:djqueue_dashboard_changelist")
    page = superuser.get(dashboard, {"database": "queues"}).content.decode()
    assert 'data-queue="placed.dash"' in page and 'data-queue="home.q"' not in page
    assert '<b data-database="queues">' in page
    home = superuser.get(dashboard).content.decode()
    assert 'data-queue="home.q"' in home and 'data-queue="placed.dash"' not in home
    queue = Queue.objects.using("queues").get(name="placed.dash")
    pause = reverse("admin:djqueue_dashboard_operation", args=[queue.pk, "pause"])
    response = superuser.post(pause + "?database=queues")
    assert response.status_code == 302 and response["Location"].endswith("?database=queues")
    assert Queue.objects.using("queues").get(name="placed.dash").paused
    assert not Queue.objects.get(name="home.q").paused


def test_the_home_dashboard_shows_a_partitioned_queue_whole_and_by_partition(superuser):
    djqueue.create_queue("parted.dash")
    for _ in range(3):  # a keyless batch goes to one partition, the next to the next
        djqueue.send_batch("parted.dash", [{"n": i} for i in range(3)])
    for db in ("default", "queues", "p2", "p3"):
        with dialects.using(db):
            rollups.sample_depth()
    page = superuser.get(reverse("admin:djqueue_dashboard_changelist")).content.decode()
    assert 'data-partitioned="parted.dash"' in page
    assert '<td class="num" data-total="ready">9</td>' in page
    for db in ("queues", "p2", "p3"):
        assert f'data-partition="parted.dash@{db}"' in page
    assert page.count('<td class="num" data-count="ready">3</td>') >= 3


def test_api_clients_are_kept_on_a_home_database_that_is_not_the_default_one(superuser):
    """The API checks a request's token on the home database (``DJQUEUE["DATABASE"]``).
    ``djqueue_api_client`` created clients on Django's default one, and the admin's
    clients list and page read them there: with a home elsewhere, a new client's grant
    and token pointed at a client the home database did not hold. The command, the
    list and the page (its grants and tokens) use the home database now."""
    import io

    from django.conf import settings
    from django.test import override_settings

    from djqueue.http import access
    from djqueue.models import ApiClient, ApiPermission, ApiToken

    with override_settings(DJQUEUE={**settings.DJQUEUE, "DATABASE": "queues"}):
        printed = io.StringIO()
        call_command("djqueue_api_client", "create", "svc", "--grant", "orders.*:send",
                     stdout=printed)
        token = printed.getvalue().strip()
        assert access.authenticate(f"Bearer {token}").allows("orders.paid", ApiPermission.SEND)
        assert not ApiClient.objects.using("default").exists()
        client = ApiClient.objects.using("queues").get()
        listed = superuser.get(reverse("admin:djqueue_apiclient_changelist"))
        assert [c.pk for c in listed.context["cl"].result_list] == [client.pk]
        page = superuser.get(reverse("admin:djqueue_apiclient_change", args=[client.pk]))
        assert page.status_code == 200
        assert token[4:16] in page.content.decode() and "orders.*" in page.content.decode()
        call_command("djqueue_api_client", "list", stdout=printed)
        assert "svc" in printed.getvalue() and "grant send on orders.*" in printed.getvalue()
        for action in ("issue_token", "rotate_tokens", "revoke_tokens"):
            done = superuser.post(reverse("admin:djqueue_apiclient_changelist"),
                                  {"action": action, ACTION_CHECKBOX_NAME: [client.pk]})
            assert done.status_code == 302, action
        tokens = ApiToken.objects.using("queues")
        assert tokens.count() == 3 and not tokens.filter(revoked_at__isnull=True).exists()
        with pytest.raises(access.Unauthenticated):
            access.authenticate(f"Bearer {token}")
