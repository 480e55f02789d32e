"""Managing the HTTP API's clients: the command and the admin (permission-checked)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from djqueue.http import access
from djqueue.models import ApiClient, ApiGrant, ApiPermission, ApiToken

pytestmark = pytest.mark.django_db(transaction=True)


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("djqueue_api_client", *args, stdout=out)
    return out.getvalue().strip()


def test_the_command_creates_grants_rotates_and_revokes():
    first = command("create", "billing", "--grant", "orders.*:send", "--grant",
                    "invoices:full_control", "--rate", "50")
    assert access.authenticate(f"Bearer {first}").allows("orders.eu", ApiPermission.SEND)
    client = ApiClient.objects.get(name="billing")
    assert client.requests_per_second == 50
    assert set(client.grants.values_list("queue_pattern", "permission")) == {
        ("orders.*", ApiPermission.SEND), ("invoices", ApiPermission.FULL_CONTROL)}
    command("grant", "billing", "refunds", "receive")
    assert ApiGrant.objects.filter(client=client, queue_pattern="refunds").exists()
    second = command("rotate", "billing", "--overlap", "60")
    old = ApiToken.objects.get(key=first[4:16])
    assert timezone.now() < old.expires_at <= timezone.now() + timedelta(seconds=61)
    access.authenticate(f"Bearer {first}")  # still usable during the overlap
    access.authenticate(f"Bearer {second}")
    assert command("revoke", second[:16]) == "Revoked."
    with pytest.raises(access.Unauthenticated):
        access.authenticate(f"Bearer {second}")
    listing = command("list")
    assert "billing, 50 requests/s" in listing and "revoked" in listing
    for bad in (["create", "billing"], ["create", "x", "--grant", "orders"],
                ["grant", "billing", "bad pattern!", "send"], ["token", "nobody"],
                ["grant", "billing", "refunds\n", "send"],  # "$" would let it through
                # bytes argv holds that are no UTF-8, as Python reads them (surrogateescape)
                ["create", "caf\udce9"], ["token", "caf\udce9"], ["revoke", "djq_\udcff"],
                ["revoke", "djq_unknownkey00"]):
        with pytest.raises(CommandError):
            command(*bad)
    assert "nobody" not in command("list")


def test_the_admin_issues_tokens_only_with_the_change_permission(admin_theme):
    client = ApiClient.objects.create(name="svc")
    admin = User.objects.create_superuser("root", password="x" * 12)
    viewer = User.objects.create_user("viewer", password="x" * 12, is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_apiclient"))
    url = reverse("admin:djqueue_apiclient_changelist")
    browser = Client()
    browser.force_login(viewer)
    page = browser.get(url)
    assert page.status_code == 200 and "issue_token" not in page.content.decode()
    browser.post(url, {"action": "issue_token", "_selected_action": [client.pk]})
    assert not ApiToken.objects.exists()
    browser.force_login(admin)
    done = browser.post(url, {"action": "issue_token", "_selected_action": [client.pk]},
                        follow=True)
    text = done.content.decode()
    token = text[text.index("djq_"):text.index("djq_") + 60]
    assert access.authenticate(f"Bearer {token}").name == "client 'svc'"
    browser.post(url, {"action": "revoke_tokens", "_selected_action": [client.pk]})
    with pytest.raises(access.Unauthenticated):
        access.authenticate(f"Bearer {token}")
    change = browser.get(reverse("admin:djqueue_apiclient_change", args=[client.pk]))
    assert change.status_code == 200 and token[4:16] in change.content.decode()
    assert token[17:] not in change.content.decode()  # the secret is never shown again


def test_a_token_expires_after_seconds_or_a_timedelta_and_refuses_a_bool():
    client = ApiClient.objects.create(name="svc")
    before = timezone.now()
    access.issue_token(client, expires_in=60)
    access.issue_token(client, expires_in=timedelta(hours=1))
    expiries = sorted(t.expires_at - before for t in ApiToken.objects.filter(client=client))
    assert timedelta(seconds=59) < expiries[0] <= timedelta(seconds=61)
    assert timedelta(minutes=59) < expiries[1] <= timedelta(minutes=61)
    with pytest.raises(TypeError, match="not True or False"):
        access.issue_token(client, expires_in=True)
    assert ApiToken.objects.filter(client=client).count() == 2


def test_the_admin_counts_the_tokens_the_api_accepts_and_lists_unreadable_times(admin_theme):
    """The clients' list counted a client's usable tokens in Python from the tokens'
    times: a time a hand edit left unreadable failed the whole list (SQLite,
    PostgreSQL), and MariaDB's zero date, read as None, counted as never expiring
    where the API refuses it. It counts in SQL now, by the API's own rule."""
    from djqueue.storage.statements import api_statements
    from tests.conftest import write_unreadable_time

    client = ApiClient.objects.create(name="svc")
    tokens = [access.issue_token(client) for _ in range(4)]
    access.issue_token(client, expires_in=-60)  # expired
    rows = list(ApiToken.objects.filter(client=client).order_by("pk"))
    ApiToken.objects.filter(pk=rows[0].pk).update(revoked_at=timezone.now())
    write_unreadable_time("djqueue_apitoken", "expires_at", rows[1].pk)
    for column in ("created_at", "last_used_at"):
        write_unreadable_time("djqueue_apitoken", column, rows[2].pk)
    write_unreadable_time("djqueue_apiclient", "created_at", client.pk)
    now = timezone.now()
    accepted = sum(api_statements.usable_token("default", row.key, now) is not None
                   for row in rows)
    # PostgreSQL's 'infinity' and SQLite's text sort after now: not expired; MariaDB's
    # zero date before it.
    assert accepted == (2 if connection.vendor == "mysql" else 3)
    for token in tokens[2:]:
        assert access.authenticate(f"Bearer {token}").name == "client 'svc'"
    browser = Client()
    browser.force_login(User.objects.create_superuser("root", password="x" * 12))
    page = browser.get(reverse("admin:djqueue_apiclient_changelist"))
    assert page.status_code == 200
    [listed] = page.context["cl"].result_list
    assert f'<td class="field-usable_tokens">{accepted}</td>' in page.content.decode()
    assert listed.created_at is None


def test_the_command_lists_each_tokens_state_by_the_apis_rule():
    """``list`` printed each token's expiry from its row: an unreadable one failed the
    command (SQLite, PostgreSQL) and on MariaDB printed "no expiry" for a token the API
    refuses. It states each token by the API's rule now."""
    from tests.conftest import write_unreadable_time

    command("create", "svc")
    client = ApiClient.objects.get()
    access.issue_token(client, expires_in=-60)
    access.issue_token(client, expires_in=3600)
    access.issue_token(client)
    rows = list(ApiToken.objects.order_by("pk"))
    access.revoke_token(rows[3].key)
    write_unreadable_time("djqueue_apitoken", "expires_at", rows[0].pk)
    listed = [line.split("_… ")[1] for line in command("list").splitlines() if "token" in line]
    # 'infinity' (PostgreSQL) and SQLite's text sort after now; MariaDB's zero date before.
    assert listed[0] == ("expired" if connection.vendor == "mysql" else "no expiry")
    assert listed[1] == "expired " + f"{rows[1].expires_at:%Y-%m-%d %H:%M}"
    assert listed[2] == "expires " + f"{rows[2].expires_at:%Y-%m-%d %H:%M}"
    assert listed[3] == "revoked"
    # One statement for every client's tokens: it read them three times a client.
    command("create", "other")
    with CaptureQueriesContext(connection) as one:
        command("list")
    for name in ("a", "b", "c"):
        command("create", name)
    with CaptureQueriesContext(connection) as five:
        command("list")
    assert len(five) == len(one)
