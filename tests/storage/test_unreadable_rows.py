"""djqueue.storage.unreadable_rows on every database: rows read in one statement, and,
when one row's time cannot be read (a hand edit), every row still, with None for each
time of that row that cannot be read and the rest as stored."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from djqueue.models import Worker
from djqueue.storage.unreadable_rows import read_rows, read_values, values_of
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
