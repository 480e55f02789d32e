"""Migrations that move data, run backwards and forwards on the test database itself:
what a deployment upgrading with processes running gets."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from djqueue.models import ProcessKind, Worker

pytestmark = pytest.mark.django_db(transaction=True)


def migrate(target: str | None = None) -> None:
    """To ``target``, or to the newest migration."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([("djqueue", target)] if target else
                     executor.loader.graph.leaf_nodes("djqueue"))


def test_the_worker_kind_migration_reads_the_kind_of_live_rows_from_their_names():
    migrate("0024_queue_retry_jitter")
    try:
        with connection.cursor() as cursor:
            for pk, lock_key in (("host:1:abcd", "w"), ("http:host:2:abcd", "h"),
                                 ("receive:host:3:abcd", "r")):
                cursor.execute(
                    "INSERT INTO djqueue_worker (id, hostname, pid, lock_key, queues, "
                    "concurrency, started_at, heartbeat_at, holding, wake_address, held_ids) "
                    "VALUES (%s, 'host', 1, %s, '[]', 0, %s, %s, 0, '', '[]')",
                    [pk, lock_key, "2026-12-02 00:00:00", "2026-12-02 00:00:00"])
    finally:
        migrate()
    assert dict(Worker.objects.values_list("id", "kind")) == {
        "host:1:abcd": ProcessKind.WORKER, "http:host:2:abcd": ProcessKind.HTTP,
        "receive:host:3:abcd": ProcessKind.RECEIVE}
