"""PostgreSQL: the hot tables' autovacuum settings (migration 0014), the reaper's vacuum
past VACUUM_DEAD_ROWS, and the system check that warns when autovacuum is off."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings

import djqueue
from djqueue.checks import check_database_features
from djqueue.conf import get_settings
from djqueue.maintenance.reaper import Reaper
from djqueue.maintenance.vacuuming import dead_rows
from tests.conftest import vendor, wait_until

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(vendor() != "postgresql", reason="PostgreSQL only")]


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
        connection.close()  # a backend flushes its statistics as it exits
        wait_until(lambda: dead_rows("default").get("djqueue_message", 0) >= 5000, 30,
                   "the server to count the dead rows")
        before = dead_rows("default")["djqueue_message"]
        with override_settings(DJQUEUE={"VACUUM_DEAD_ROWS": 4000}):
            get_settings.cache_clear()
            reaper = Reaper()
            report = reaper.reap()
            reaper.vacuuming.wait(60)
        get_settings.cache_clear()
        assert report.vacuums == 1 and reaper.vacuuming.started[0][0] == "djqueue_message"
        wait_until(lambda: dead_rows("default")["djqueue_message"] < 1000, 30,
                   "the vacuum to be counted")
        with connection.cursor() as cursor:
            cursor.execute("SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables "
                           "WHERE relname = 'djqueue_message'")
            assert cursor.fetchone()[0]
        print(f"dead rows of djqueue_message: {before} before the reaper's vacuum, "
              f"{dead_rows('default')['djqueue_message']} after")
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
