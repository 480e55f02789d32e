"""``database_vendors.vendor_of`` names each alias's vendor as its connection does, and
what is decided from it follows what may change while a process runs (the fast path
switched off in a test) rather than being kept with it."""

import pytest
from django.db import connections

from djqueue.storage import dialects, fastpath
from djqueue.storage.database_vendors import vendor_of


def test_each_alias_is_named_by_its_connections_vendor():
    for alias in connections:
        assert vendor_of(alias) == connections[alias].vendor
        assert vendor_of(alias) == connections[alias].vendor  # the kept answer, the same


@pytest.mark.parametrize("fast_path", [True, False])
def test_copied_records_follow_the_fast_path(monkeypatch, fast_path):
    """MySQL and MariaDB copy a task's record only on the fast path (its statement carries
    the runs' values escaped into its text); PostgreSQL and SQLite always can."""
    dialects.copies_task_records("default")  # the vendor kept before the switch
    monkeypatch.setattr(fastpath.verified, "enabled", fast_path)
    expected = fast_path or vendor_of("default") != "mysql"
    assert dialects.copies_task_records("default") is expected


def test_an_alias_not_configured_is_refused_by_name():
    from django.utils.connection import ConnectionDoesNotExist

    with pytest.raises(ConnectionDoesNotExist, match="no-such-alias"):
        vendor_of("no-such-alias")
