"""PostgreSQL: the hot tables' autovacuum settings (migration 0014), the reaper's vacuum
past VACUUM_DEAD_ROWS and its analyze of a table that outgrew its statistics, and the
system check that warns when autovacuum is off."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import override_settings

import djqueue
from djqueue.checks import check_database_features
from djqueue.conf import get_settings
from djqueue.maintenance.reaper import Reaper
from djqueue.maintenance.vacuuming import table_counts
from djqueue.models import Message, State
from djqueue.storage.statements.claim_statements import _lock_ready_sql, built_sql
from tests.conftest import vendor, wait_until

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(vendor() != "postgresql", reason="PostgreSQL only")]


def dead_rows() -> int:
    return table_counts("default")["djqueue_message"].dead


def outgrown() -> int:
    return table_counts("default")["djqueue_message"].outgrown


def flush_statistics() -> None:
    """Have this session's counts of rows written reach the server's statistics now.

    A backend sends them on its own at most once a second while idle, and at once when
    it exits; PostgreSQL 15 added the function that asks for it at the end of this
    statement. It works wherever the session lives on: in Django's connection pool,
    or behind PgBouncer, where closing the connection does not end the backend."""
    connection.ensure_connection()
    if connection.pg_version < 150000:  # older servers: a backend flushes as it exits
        connection.close()
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")


def setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT setting FROM pg_settings WHERE name = %s", [name])
        return cursor.fetchone()[0]


def test_the_hot_tables_have_their_own_autovacuum_settings():
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, reloptions FROM pg_class WHERE relname IN "
                       "('djqueue_message', 'djqueue_queuelimiter', 'djqueue_taskrecord')")
        found = dict(cursor.fetchall())
    assert len(found) == 3
    for options in found.values():
        assert "autovacuum_vacuum_threshold=5000" in options
        assert "autovacuum_vacuum_scale_factor=0" in options


def test_the_reaper_vacuums_a_table_past_the_threshold():
    djqueue.create_queue("vac")
    with connection.cursor() as cursor:  # no autovacuum of it meanwhile, whatever the server's
        cursor.execute("ALTER TABLE djqueue_message SET (autovacuum_enabled = false)")
    try:
        for _ in range(5):
            djqueue.send_batch("vac", list(range(1000)))
            while messages := djqueue.receive("vac", max_messages=500):
                djqueue.ack_many(messages)
        flush_statistics()
        wait_until(lambda: dead_rows() >= 5000, 30,
                   "the server to count the dead rows")
        before = dead_rows()
        with override_settings(DJQUEUE={"VACUUM_DEAD_ROWS": 4000}):
            get_settings.cache_clear()
            reaper = Reaper()
            report = reaper.reap()
            reaper.vacuuming.wait(60)
        get_settings.cache_clear()
        assert report.vacuums == 1
        [started] = reaper.vacuuming.started
        assert started.statement == "VACUUM (ANALYZE)" and started.table == "djqueue_message"
        wait_until(lambda: dead_rows() < 1000, 30,
                   "the vacuum to be counted")
        with connection.cursor() as cursor:
            cursor.execute("SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables "
                           "WHERE relname = 'djqueue_message'")
            assert cursor.fetchone()[0]
        print(f"dead rows of djqueue_message: {before} before the reaper's vacuum, "
              f"{dead_rows()} after")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE djqueue_message RESET (autovacuum_enabled)")


#: Rows the size of a small email job: enough of them fill the pages that make the
#: planner's misjudgement show.
BURST = [{"to": f"user{n}@example.com", "subject": "x" * 60} for n in range(20_000)]


def drain_all() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM djqueue_message")


def live_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT n_live_tup FROM pg_stat_user_tables "
                       "WHERE relname = 'djqueue_message'")
        return cursor.fetchone()[0]


def claim_plan(queue_id: int) -> str:
    """The server's plan for the worker's claim of 500 from the head of a queue."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + built_sql(connection, "lock_ready", _lock_ready_sql),
                       [queue_id, int(State.READY), 500])
        return "\n".join(row[0] for row in cursor.fetchall())


def planned_rows(plan: str) -> int:
    """The rows the planner expects the plan's top node (the LIMIT) to give."""
    return int(re.search(r"rows=(\d+)", plan.splitlines()[0]).group(1))


def test_the_reaper_analyzes_a_table_that_outgrew_its_statistics():
    """A queue emptied, analyzed while empty, then filled by a burst: the planner
    believes the table empty until it is analyzed again, and the reaper does that.

    (Before migration 0021 that belief made every claim sort the whole backlog,
    read through the due index by ``state = 1``; that index now holds no ready
    message, so the claim index serves the claim even then.)"""
    queue = djqueue.create_queue("burst")
    with connection.cursor() as cursor:  # no autovacuum of it meanwhile, whatever the server's
        cursor.execute("ALTER TABLE djqueue_message SET (autovacuum_enabled = false)")
    try:
        # Analyzed while busy, then drained and vacuumed while empty, as the reaper's
        # vacuum at the end of a drain does: busy workers keep it from truncating the
        # table. Each statement after the server counted the rows before it.
        for change, live, statement in (
                (lambda: djqueue.send_batch("burst", BURST), len(BURST), "ANALYZE"),
                (drain_all, 0, "VACUUM (ANALYZE, TRUNCATE false)")):
            change()
            flush_statistics()
            wait_until(lambda live=live: live_rows() == live, 30, "the server to count the rows")
            with connection.cursor() as cursor:
                cursor.execute(f"{statement} djqueue_message")
        djqueue.send_batch("burst", BURST)
        stale = claim_plan(queue.pk)
        assert "Sort" not in stale and "djqueue_msg_claim" in stale, stale
        assert planned_rows(stale) == 1, stale  # the statistics of the empty table
        flush_statistics()
        wait_until(lambda: outgrown() > 0, 30,
                   "the server to count the new rows")
        reaper = Reaper()
        report = reaper.reap()
        reaper.vacuuming.wait(60)
        assert report.analyzes == 1 and report.vacuums == 0
        [started] = reaper.vacuuming.started
        assert started.statement == "ANALYZE" and started.table == "djqueue_message"
        assert started.rows >= 18_000
        fresh = claim_plan(queue.pk)
        assert "Index Scan using djqueue_msg_claim" in fresh and "Sort" not in fresh, fresh
        assert planned_rows(fresh) == 500, fresh
        assert outgrown() == 0
        assert Message.objects.filter(queue=queue).count() == len(BURST)
        print(f"claim plan with the statistics of the empty table:\n{stale}\n"
              f"after the reaper's analyze:\n{fresh}")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE djqueue_message RESET (autovacuum_enabled)")


def test_the_check_warns_when_autovacuum_is_off():
    found = check_database_features(databases=["default"])
    if setting("autovacuum") == "on" and setting("track_counts") == "on":
        assert found == []
    else:
        assert [m.id for m in found] == ["djqueue.W003"]
        assert "VACUUM_DEAD_ROWS" in found[0].msg
