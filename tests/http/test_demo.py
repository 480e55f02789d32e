"""``make run``'s set-up prints a working demo token and curl line for the HTTP API,
keeps a periodic schedule in the database, and answers a browser's ask for its icon."""

from __future__ import annotations

import io
import json
import re
import subprocess

import pytest
from django.core.management import call_command

from djqueue.http import access
from djqueue.maintenance.periodic import Schedule
from djqueue.models import ApiPermission, Message, PeriodicSchedule
from project.tasks import tidy_sessions

pytestmark = pytest.mark.django_db(transaction=True)


def test_demo_setup_prints_a_token_that_may_send_to_the_demo_queues(api_server):
    out = io.StringIO()
    call_command("demo_setup", stdout=out)
    first = re.search(r"demo token: (djq_\S+)", out.getvalue()).group(1)
    call_command("demo_setup", stdout=io.StringIO())  # a second run revokes the first token
    with pytest.raises(access.Unauthenticated):
        access.authenticate(f"Bearer {first}")
    out = io.StringIO()
    call_command("demo_setup", stdout=out)
    token = re.search(r"demo token: (djq_\S+)", out.getvalue()).group(1)
    caller = access.authenticate(f"Bearer {token}")
    assert caller.allows("emails", ApiPermission.SEND) and caller.allows("flaky.dead",
                                                                         ApiPermission.RECEIVE)
    assert "curl -X POST" in out.getvalue()
    [nightly] = PeriodicSchedule.objects.all()  # made once, however many runs
    assert Schedule.from_row(nightly).task() is tidy_sessions
    with api_server.client(token) as http:
        sent = http.post("queues/emails/messages", json={"payload": {"to": "you@example.com"}})
        assert sent.status_code == 201, sent.text


def test_the_demos_curl_lines_send_and_receive_as_printed(api_server, monkeypatch):
    """What a user copies from make run's terminal works as it stands."""
    monkeypatch.setenv("PORT", api_server.base.split(":")[2].split("/")[0])
    out = io.StringIO()
    call_command("demo_setup", stdout=out)
    send, receive = re.findall(r"^  (curl .*)$", out.getvalue(), re.MULTILINE)
    sent = json.loads(subprocess.run(["bash", "-c", send], capture_output=True, check=True,
                                     timeout=30).stdout)
    assert Message.objects.filter(pk=sent["id"], queue__name="emails").exists(), sent
    got = json.loads(subprocess.run(["bash", "-c", receive], capture_output=True, check=True,
                                    timeout=30).stdout)
    assert sorted(m["payload"]["user"] for m in got["messages"]) == list(range(8)), got


def test_the_demo_answers_the_browsers_ask_for_its_icon(client):
    """Unanswered, every new browser page left a "Not Found: /favicon.ico" line in the
    demo's terminal."""
    response = client.get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/svg+xml"
    assert response.content.startswith(b"<svg") and "max-age=86400" in response["Cache-Control"]
