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
from djqueue.exceptions import ConfigurationError
from djqueue.monitoring import rollups
from tests.conftest import write_unreadable_time
from tests.models import Effect
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


def test_the_dashboard_shows_the_queue_itself_and_runs_its_buttons(superuser,
                                                                  one_queue_unreadable):
    """The dashboard of one queue, its charts, and its buttons read the queue's row
    whole, and failed on it (SQLite, PostgreSQL)."""
    page = reverse("admin:djqueue_dashboard_changelist")
    for asked in ({"queue": "q.edited"}, {"queue": "q.edited", "part": "charts"}):
        assert superuser.get(page, asked).status_code == 200, asked
    edited = djqueue.get_queue("q.edited")
    pause = reverse("admin:djqueue_dashboard_operation", args=[edited.pk, "pause"])
    assert superuser.post(pause).status_code == 302
    assert djqueue.get_queue("q.edited", fresh=True).paused


def test_a_queue_whose_creation_time_cannot_be_read_is_served_with_the_others():
    """Reading a queue's row for work read its creation time too, so a receive or a
    worker serving several queues failed for all of them at one such row, and the
    queue itself took no send (SQLite, PostgreSQL). Its work never reads that time:
    the queues are found without it, and the HTTP API's attributes show it as null."""
    from djqueue.http.queue_endpoints import _attributes
    from djqueue.storage import queue_lookup

    djqueue.create_queue("t.record")
    edited = djqueue.create_queue("news:all")
    write_unreadable_time("djqueue_queue", "created_at", edited.pk)
    queue_lookup.forget_cached()
    for n in range(4):
        djqueue.send("news:all" if n % 2 else "t.record", {"n": n})
    got = djqueue.receive(["t.record", "news:all"], max_messages=4)
    assert sorted(m.payload["n"] for m in got) == [0, 1, 2, 3]
    for message in got:
        message.ack()
    for n in (4, 5):
        djqueue.send("news:all" if n % 2 else "t.record", {"n": n})
    assert djqueue.drain("t.record", "news:all").acked == 2
    assert sorted(Effect.objects.values_list("key", flat=True)) == [4, 5]
    described = _attributes(djqueue.get_queue("news:all", fresh=True))
    assert (described["name"], described["created_at"]) == ("news:all", None)


def test_a_queue_whose_creation_time_cannot_be_read_takes_new_limits():
    """set_limits read the queue's whole row to change it, and failed on such a time
    (SQLite, PostgreSQL): it reads the row as the queue's work does."""
    edited = djqueue.create_queue("t.limited")
    write_unreadable_time("djqueue_queue", "created_at", edited.pk)
    changed = djqueue.set_limits("t.limited", rate_limit="50/s", concurrency_limit=2)
    assert (changed.rate_limit, changed.concurrency_limit) == ("50/s", 2)
    assert djqueue.get_queue("t.limited", fresh=True).concurrency_limit == 2
    with pytest.raises(ConfigurationError, match=r"Invalid limits for 't\.limited'"):
        djqueue.set_limits("t.limited", rate_limit="fast")


def test_a_queue_whose_dead_letter_queue_cannot_be_read_is_described():
    """The HTTP API's attributes named the dead-letter queue through the queue's foreign
    key, which read that queue's row whole (SQLite, PostgreSQL)."""
    from djqueue.http.queue_endpoints import _attributes

    dead = djqueue.create_queue("t.dead")
    djqueue.create_queue("t.jobs", dead_letter_queue=dead)
    write_unreadable_time("djqueue_queue", "created_at", dead.pk)
    described = _attributes(djqueue.get_queue("t.jobs", fresh=True))
    assert (described["name"], described["dead_letter_queue"]) == ("t.jobs", "t.dead")
