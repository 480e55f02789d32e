"""What reports on every queue goes on when one queue's row holds a creation time no
driver reads back (a hand edit, another tool: PostgreSQL's 'infinity', text on SQLite
that is no date). ``djqueue_queues``, ``/metrics``, the dashboard and the alarms read
every queue row, or every depth sample joined to its queue, in one statement; one such
row failed each of them for every queue. No report shows that time: they leave it
unread (djqueue.monitoring.rollups.with_depths), and the queue is reported as the
others. (Its own sends and receives still report the driver's error: docs/operations.md.)
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

import djqueue
from djqueue.monitoring import rollups
from tests.conftest import write_unreadable_time
from tests.monitoring.test_metrics import scrape

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def one_queue_unreadable() -> None:
    """Two queues with a message each, sampled; the second's creation time cannot be read."""
    for name in ("q.readable", "q.edited"):
        djqueue.create_queue(name)
        djqueue.send(name, {"n": 1})
    rollups.sample_depth()
    write_unreadable_time("djqueue_queue", "created_at", djqueue.get_queue("q.edited").pk)


def test_djqueue_queues_lists_both_queues(one_queue_unreadable):
    for args in (("list",), ("list", "--now")):
        out = StringIO()
        call_command("djqueue_queues", *args, "--json", stdout=out)
        assert {(q["name"], q["ready"]) for q in json.loads(out.getvalue())} == {
            ("q.readable", 1), ("q.edited", 1)}


def test_metrics_sample_both_queues(client, one_queue_unreadable):
    samples = scrape(client)
    ready = {dict(labels)["queue"]: value for (name, labels), value in samples.items()
             if name == "djqueue_queue_messages" and dict(labels)["state"] == "ready"}
    assert ready == {"q.readable": 1.0, "q.edited": 1.0}


def test_the_dashboard_shows_both_queues(superuser, one_queue_unreadable):
    response = superuser.get(reverse("admin:djqueue_dashboard_changelist"))
    assert response.status_code == 200
    assert {q.queue.name: q.ready for q in response.context["data"].queues} == {
        "q.readable": 1, "q.edited": 1}
