"""What shows the registered processes to a person or a scraper goes on when one worker
row holds a time its driver cannot read (a hand edit, another tool): PostgreSQL's
'infinity', MariaDB's zero date, text on SQLite that is no date. ``djqueue_workers``,
``/metrics`` and the dashboard read every worker row in one statement; one such row
failed each of them, until the reaper judged its worker dead (WORKER_TIMEOUT later).
Now the row is shown with what could be read, its times as unreadable, and the others
as they are."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from djqueue.models import ProcessKind, Worker
from tests.conftest import write_unreadable_time
from tests.monitoring.test_metrics import scrape

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def one_row_unreadable() -> None:
    """Two worker rows; the second's heartbeat and start cannot be read."""
    for pid in (101, 102):
        Worker.objects.create(id=f"worker:host:{pid}", hostname="host", pid=pid,
                              lock_key=f"k{pid}", queues=["w.jobs"], kind=ProcessKind.WORKER,
                              concurrency=4, holding=pid - 100)
    write_unreadable_time("djqueue_worker", "heartbeat_at", "worker:host:102")
    write_unreadable_time("djqueue_worker", "started_at", "worker:host:102")


def test_djqueue_workers_lists_the_row_with_its_times_unreadable(one_row_unreadable):
    out = StringIO()
    call_command("djqueue_workers", "--json", stdout=out)
    rows = {row["id"]: row for row in json.loads(out.getvalue())}
    assert set(rows) == {"worker:host:101", "worker:host:102"}
    readable, unreadable = rows["worker:host:101"], rows["worker:host:102"]
    assert readable["heartbeat_age"] >= 0 and readable["late"] is False
    assert (unreadable["heartbeat_age"], unreadable["up"], unreadable["late"]) == (None, None, None)
    assert (unreadable["holding"], unreadable["queues"], unreadable["concurrency"]) == (
        2, ["w.jobs"], 4)
    table = StringIO()
    call_command("djqueue_workers", stdout=table)
    [line] = [line for line in table.getvalue().splitlines() if "worker:host:102" in line]
    assert "unreadable" in line


def test_metrics_count_the_row_and_leave_out_only_its_heartbeat_age(client, one_row_unreadable):
    samples = scrape(client)
    up = {labels for (name, labels), value in samples.items()
          if name == "djqueue_worker_up" and value == 1.0}
    assert {dict(labels)["worker"] for labels in up} == {"worker:host:101", "worker:host:102"}
    ages = {dict(labels)["worker"] for (name, labels) in samples
            if name == "djqueue_worker_heartbeat_age_seconds"}
    assert ages == {"worker:host:101"}
    assert samples[("djqueue_worker_messages_held", (("worker", "worker:host:102"),))] == 2.0


def test_the_dashboard_shows_the_row_with_its_age_unknown(superuser, one_row_unreadable):
    response = superuser.get(reverse("admin:djqueue_dashboard_changelist"))
    assert response.status_code == 200
    ages = {w.worker.pk: w.heartbeat_age for w in response.context["data"].workers}
    assert ages["worker:host:102"] is None and ages["worker:host:101"] >= 0
    assert '<tr data-kind="worker"><td>worker:host:102</td>' in response.content.decode()
