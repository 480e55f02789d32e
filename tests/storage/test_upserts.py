"""Every kind of upsert djqueue writes (djqueue.storage.statements.vendor_sql), on each
database: rows inserted, then updated, as asked; and on MySQL and MariaDB, no statement
leaves a warning (MySQL 8.0.20 deprecated ``VALUES(c)``; djqueue names the inserted row
by an alias there, see dialects.names_inserted_row)."""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

import djqueue
from djqueue.models import MessageGroup, Period, QueueStat, TaskRecord
from djqueue.storage import dialects
from djqueue.storage.statements import group_statements, message_inserts, stat_counters
from djqueue.storage.statements.task_record_copy import RunEnd, copy_records
from djqueue.storage.statements.vendor_sql import INSERTED_ROW
from tests import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def no_warnings() -> Iterator[list[str]]:
    """Collect the statements that ran, failing on any that left a warning (MySQL and
    MariaDB; elsewhere the statements are only collected)."""
    ran: list[str] = []

    def check(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        ran.append(sql)
        if connection.vendor == "mysql":
            with connection.connection.cursor() as cursor:  # same session, own results
                cursor.execute("SHOW WARNINGS")
                assert cursor.fetchall() == (), sql
        return result

    with connection.execute_wrapper(check):
        yield ran


def test_the_row_alias_is_used_where_mysql_has_it():
    mysql = connection.vendor == "mysql" and not connection.mysql_is_mariadb
    assert dialects.names_inserted_row(connection) == (
        mysql and connection.mysql_version >= (8, 0, 19))
    assert dialects.sql_dialect(connection) == (
        ("mysql" if mysql else "mariadb") if connection.vendor == "mysql" else connection.vendor)


def test_records_upserted_from_python_then_updated():
    now = timezone.now()
    records = [message_inserts.build(TaskRecord, id=f"u{i}", task_path="t.p", backend="default",
                                     enqueued_at=now, status="READY", priority=i)
               for i in range(4)]
    with no_warnings() as ran:
        message_inserts.upsert("default", records[:2], ["status"])
        for record in records:
            record.status, record.priority = "SUCCESSFUL", 9
        message_inserts.upsert("default", records, ["status"])  # 2 updates, 2 inserts
    assert ran
    assert sorted(TaskRecord.objects.values_list("id", "status", "priority")) == [
        ("u0", "SUCCESSFUL", 0), ("u1", "SUCCESSFUL", 1), ("u2", "SUCCESSFUL", 9),
        ("u3", "SUCCESSFUL", 9)]
    if dialects.names_inserted_row(connection):
        assert any(f"AS {INSERTED_ROW} ON DUPLICATE KEY" in sql for sql in ran)


def test_records_copied_by_the_server_then_updated():
    """The INSERT ... SELECT form: a record copied from its message's row, and copied
    again over the record that now exists (only ``update_fields`` change)."""
    if not dialects.copies_task_records(connection.alias):
        pytest.skip("this connection writes task records from Python")
    result = tasks.add.enqueue(1, 2)
    message_id = int(result.id)
    first, later = timezone.now(), timezone.now() + timedelta(seconds=5)
    with no_warnings() as ran:
        copy_records("default", [RunEnd(message_id, first, 3)], ["status"])
        TaskRecord.objects.filter(pk=result.id).update(status="RUNNING", return_value=None)
        copy_records("default", [RunEnd(message_id, later, 4)], ["status"])
    assert ran
    record = TaskRecord.objects.get(pk=result.id)
    assert (record.status, record.return_value, record.finished_at, record.args) == (
        "SUCCESSFUL", None, first, [1, 2])
    if dialects.names_inserted_row(connection):
        assert any(f") AS {INSERTED_ROW} ON DUPLICATE KEY" in sql for sql in ran)


def test_counters_added_to_existing_minutes_and_new_ones():
    queue = djqueue.create_queue("ups.stats")
    minute = stat_counters.minute_of(timezone.now())
    later = minute + timedelta(minutes=1)
    with no_warnings():
        stat_counters.add_to_minutes("default", {(queue.pk, minute): {"sent": 2, "acked": 1}})
        stat_counters.add_to_minutes("default", {(queue.pk, minute): {"sent": 3},
                                                 (queue.pk, later): {"failed": 1}})
    rows = {(row.period, row.start): (row.sent, row.acked, row.failed)
            for row in QueueStat.objects.filter(queue=queue)}
    assert rows[(Period.MINUTE, minute)] == (5, 1, 0)
    assert rows[(Period.MINUTE, later)] == (0, 0, 1)
    assert [v for (period, _), v in rows.items() if period == Period.TOTAL] == [(5, 1, 1)]


def test_counters_of_more_rows_than_a_statement_takes():
    queue = djqueue.create_queue("ups.many")
    start = stat_counters.minute_of(timezone.now())
    minutes = [start - timedelta(minutes=i) for i in range(stat_counters.CHUNK + 20)]
    with no_warnings() as ran:
        stat_counters.add_to_minutes("default", {(queue.pk, m): {"sent": 1} for m in minutes})
    assert sum("INSERT" in sql for sql in ran) == 2
    assert QueueStat.objects.filter(queue=queue, period=Period.MINUTE).count() == len(minutes)
    total = QueueStat.objects.get(queue=queue, period=Period.TOTAL)
    assert total.sent == len(minutes)


def test_group_rows_created_then_locked_again():
    queue = djqueue.create_queue("ups.groups", ordered=True)
    first, later = timezone.now(), timezone.now() + timedelta(seconds=30)
    with no_warnings():
        group_statements.lock_rows("default", [(queue.pk, "a")], first)
        group_statements.lock_rows("default", [(queue.pk, "a"), (queue.pk, "b")], later)
    assert sorted(MessageGroup.objects.filter(queue=queue).values_list("key", "touched_at")) == [
        ("a", later), ("b", later)]
