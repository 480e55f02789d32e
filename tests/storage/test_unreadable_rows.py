"""djqueue.storage.unreadable_rows on every database: rows read in one statement, and,
when one row's time cannot be read (a hand edit), every row still, with None for each
time of that row that cannot be read and the rest as stored."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Max, Min
from django.test.utils import CaptureQueriesContext

from djqueue.models import Worker
from djqueue.storage.unreadable_rows import ReadableTime, read_rows, read_values, values_of
from tests.conftest import write_unreadable_time

pytestmark = pytest.mark.django_db(transaction=True)
COLUMNS = ("id", "pid", "heartbeat_at", "started_at")


@pytest.fixture
def five_rows_one_heartbeat_unreadable():
    for i in range(5):
        Worker.objects.create(id=f"w{i}", hostname="h", pid=i + 1, lock_key=f"k{i}")
    write_unreadable_time("djqueue_worker", "heartbeat_at", "w3")
    return Worker.objects.order_by("pk")


def test_every_chunk_is_read_and_only_the_unreadable_time_is_none(
        five_rows_one_heartbeat_unreadable):
    rows = five_rows_one_heartbeat_unreadable
    values = list(read_values(rows, COLUMNS, chunk=2))
    assert [v[:2] for v in values] == [(f"w{i}", i + 1) for i in range(5)]
    assert [v[2] is None for v in values] == [False, False, False, True, False]
    assert all(v[3] is not None for v in values)
    assert values_of(rows, COLUMNS) == values
    read = read_rows(rows)
    assert [(r.pk, r.heartbeat_at is None) for r in read] == [
        (f"w{i}", i == 3) for i in range(5)]
    assert all(r.started_at is not None for r in read)


def test_rows_that_read_cost_one_statement(five_rows_one_heartbeat_unreadable):
    Worker.objects.filter(pk="w3").delete()
    with CaptureQueriesContext(connection) as queries:
        assert [r.pk for r in read_rows(Worker.objects.order_by("pk"))] == [
            "w0", "w1", "w2", "w4"]
        assert len(values_of(Worker.objects.all(), COLUMNS)) == 4
    assert len(queries) == 2


def test_readable_time_reads_an_aggregate_that_is_such_a_time_as_none(
        five_rows_one_heartbeat_unreadable):
    """ReadableTime in one statement: the unreadable heartbeat sorts last (PostgreSQL's
    'infinity', SQLite's text) or first (MariaDB's zero date), and the aggregate that
    returns it reads as None; every other one as stored."""
    rows = five_rows_one_heartbeat_unreadable
    newest = rows.aggregate(at=ReadableTime(Max("heartbeat_at")), was=Max("started_at"))
    oldest = rows.aggregate(at=ReadableTime(Min("heartbeat_at")))
    if connection.vendor == "mysql":
        assert oldest["at"] is None and newest["at"] is not None
    else:
        assert newest["at"] is None and oldest["at"] is not None
    assert rows.filter(pk="w1").aggregate(at=ReadableTime(Max("heartbeat_at")))["at"] == (
        Worker.objects.get(pk="w1").heartbeat_at)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite stores any text")
@pytest.mark.parametrize("text", ["2026-02-30 10:00:00", "0000-01-01 00:00:00",
                                  "2026-12-04 25:00:00", "2026-13-45 99:00:00"])
def test_readable_time_on_sqlite_refuses_text_python_refuses(text):
    """SQLite's date functions take a day its month lacks and year 0; Python does not.
    (Text that looks like no time at all, Django reads as None.)"""
    Worker.objects.create(id="w", hostname="h", pid=1, lock_key="k")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE djqueue_worker SET heartbeat_at = %s", [text])
    with pytest.raises(ValueError):
        list(Worker.objects.values_list("heartbeat_at", flat=True))
    assert list(Worker.objects.values_list(ReadableTime("heartbeat_at"), flat=True)) == [None]
