"""``host_clock.database_now`` gives its times as ``timezone.now()`` does, on every
database: aware UTC with USE_TZ, naive without, following a change of the setting; on
SQLite (a file on this host) the host's own time, read without a comparison."""

from datetime import UTC

import pytest
from django.db import connection
from django.utils import timezone

from djqueue.storage import host_clock

pytestmark = pytest.mark.django_db


def test_database_time_is_given_as_timezone_now_gives_it(settings):
    before = timezone.now()
    now = host_clock.database_now("default")
    assert now.tzinfo is UTC
    if connection.vendor == "sqlite":
        assert before <= now <= timezone.now()  # this host's own time
    assert abs((now - before).total_seconds()) < host_clock.WARN_PAST
    settings.USE_TZ = False
    naive = host_clock.database_now("default")
    assert naive.tzinfo is None
    assert abs((naive - timezone.now()).total_seconds()) < host_clock.WARN_PAST
    settings.USE_TZ = True
    assert host_clock.database_now("default").tzinfo is UTC


def test_sqlite_time_is_this_hosts_without_a_comparison():
    if connection.vendor != "sqlite":
        pytest.skip("a server database's time is carried from a comparison (test_host_clock)")
    host_clock.database_now("default")
    assert "default" not in host_clock._compare_due  # none started, nor due
    assert host_clock.latest_offset("default") is None  # never compared: it is this host
