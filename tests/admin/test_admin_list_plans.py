"""The admin's lists of the big tables read a page by walking an index, on every
database: no sort of the table, no temporary table, whatever the table holds.

Before, the message list joined each message's queue. With the table's statistics
current, MariaDB then scanned every message into a temporary table and sorted it,
bodies and all, to return a page of 100 (the plan a MariaDB 10.11 server crashed in,
freeing that temporary table, under the admin-under-load test). The lists now read the
rows their columns name by one more query per page (djqueue.admin.records.ReadOnlyAdmin).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import djqueue
from djqueue.models import (
    Alarm,
    AlarmPolicy,
    History,
    Metric,
    Outcome,
    Period,
    QueueStat,
    TraceEvent,
)
from djqueue.models.trace import Event

pytestmark = pytest.mark.django_db(transaction=True)
#: Rows per queue: enough that a planner with current statistics sorts rather than walks
#: when the query leaves it the choice. MariaDB 10.11 chose to sort at each size tried:
#: 1,500 rows a queue (this one), 20,000 and 100,000.
ROWS = 1500
#: What a plan says when it sorts or spills: MariaDB/MySQL, PostgreSQL, SQLite.
SORTS = re.compile(r"filesort|Using temporary|\bSort\b|TEMP B-TREE")
TABLES = ["djqueue_message", "djqueue_history", "djqueue_traceevent", "djqueue_queuestat",
          "djqueue_alarm", "djqueue_alarmpolicy"]


@pytest.fixture
def big_tables() -> list[str]:
    """Two queues' worth of rows in each big table, and current statistics on them."""
    now = timezone.now()
    names = []
    for n, name in enumerate(["plans.a", "plans.b"]):
        queue = djqueue.create_queue(name)
        names.append(name)
        djqueue.send_batch(name, [{"n": i, "pad": "x" * 200} for i in range(ROWS)])
        History.objects.bulk_create(
            History(id=n * ROWS + i + 1, queue=queue, outcome=Outcome.ACKED, attempts=1,
                    size=10, sent_at=now, claimed_at=now, finished_at=now)
            for i in range(ROWS))
        TraceEvent.objects.bulk_create(
            TraceEvent(message_id=i, queue=queue, event=Event.SENT, at=now)
            for i in range(ROWS))
        QueueStat.objects.bulk_create(
            QueueStat(queue=queue, period=Period.MINUTE, start=now - timedelta(minutes=i))
            for i in range(ROWS))
    policies = [AlarmPolicy.objects.create(name=f"plans.{n}", metric=Metric.DEPTH, threshold=1)
                for n in range(3)]
    Alarm.objects.bulk_create(
        Alarm(policy=policies[i % 3], subject=names[i % 2], value=2, threshold=1,
              fired_at=now - timedelta(seconds=i)) for i in range(ROWS))
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {', '.join(TABLES)}, djqueue_queue")
            cursor.fetchall()
        elif connection.vendor == "postgresql":
            cursor.execute(f"ANALYZE {', '.join(TABLES)}, djqueue_queue")
        else:
            cursor.execute("ANALYZE")
    return names


#: Each list checked, and the column naming a related row (each read with the page).
LISTS = [("message", "queue"), ("history", "queue"), ("traceevent", "queue"),
         ("queuestat", "queue"), ("alarm", "policy")]


def test_list_pages_walk_an_index_and_read_related_rows_apart(superuser: Client,
                                                              big_tables: list[str]) -> None:
    """One test for all the lists: filling the tables is most of its time."""
    named = {*big_tables, "plans.0", "plans.1", "plans.2"}
    for name, column in LISTS:
        response = superuser.get(reverse(f"admin:djqueue_{name}_changelist"))
        assert response.status_code == 200, name
        changelist = response.context["cl"]
        plan = changelist.queryset[:changelist.list_per_page].explain()
        if column == "policy":  # by time, then id: a sort of a few rows may be cheaper
            assert "alarmpolicy" not in plan and "temporary" not in plan, plan
        else:
            assert not SORTS.search(plan), f"the {name} list's page sorts:\n{plan}"
        # Each row's queue (policy) was read with the page, by one query, not row by row.
        with CaptureQueriesContext(connection) as later:
            shown = {str(getattr(row, column)) for row in changelist.result_list}
        assert shown and shown <= named and not later.captured_queries, name
        cells = set(re.findall(rf'class="field-{column}[^"]*">(?:<a [^>]*>)?([^<]*)<',
                               response.content.decode()))
        assert cells == shown, name

    # The dashboard's recent alarms: joined with their policies, MariaDB read the
    # policies first and sorted every alarm in a temporary table to show the last ten.
    with CaptureQueriesContext(connection) as queries:
        response = superuser.get(reverse("admin:djqueue_dashboard_changelist"))
    assert response.status_code == 200
    [recent] = [q["sql"] for q in queries.captured_queries
                if re.search(r'FROM [`"]?djqueue_alarm[`"]? ', q["sql"])]
    assert "alarmpolicy" not in recent and "JOIN" not in recent.upper(), recent
    assert "plans.0" in response.content.decode()  # the policies, read by a second query
