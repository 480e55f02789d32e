"""What the benchmarks share: the bench database, Django set-up, a raw connection."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BENCH_DB = "djq_bench"


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()


def fresh_database(url: str):
    """Create the bench database anew, set Django up on it and migrate; returns an admin
    connection for :func:`drop_database`."""
    admin = raw_connection(url.rsplit("/", 1)[0] + "/mysql")
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
    admin.cursor().execute(f"CREATE DATABASE {BENCH_DB} CHARACTER SET utf8mb4")
    setup_django(url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return admin


#: The InnoDB buffer pool the bench runs with, at least (see buffer_pool).
BUFFER_POOL_BYTES = 1 << 30


@contextlib.contextmanager
def buffer_pool(admin, size: int = BUFFER_POOL_BYTES) -> Iterator[int]:
    """Run with MariaDB's InnoDB buffer pool at least ``size`` bytes; the server's own
    size is restored afterwards. Yields the size in effect.

    Why: the server default, 128 MiB, holds less than the 1M-message backlog's table
    (about 300 MB with its indexes), so that drain read ~1,300 pages from disk per
    20,000 messages and measured the disk's reads rather than the queue (0.78 of the
    10k drain, 0.95 with the table in memory). A database server is sized to its data.
    """
    cursor = admin.cursor()
    cursor.execute("SELECT @@GLOBAL.innodb_buffer_pool_size")
    (before,) = cursor.fetchone()
    if before >= size:
        yield before
        return
    _resize(cursor, size)
    try:
        yield size
    finally:
        _resize(cursor, before)


def _resize(cursor, size: int) -> None:
    """SET GLOBAL innodb_buffer_pool_size and wait until the online resize is done."""
    cursor.execute("SET GLOBAL innodb_buffer_pool_size = %s", (size,))
    for _ in range(600):
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_resize_status'")
        row = cursor.fetchone()
        if not row or not row[1] or "complete" in row[1].lower():
            return
        time.sleep(0.1)


def drop_database(admin) -> None:
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")


def raw_connection(url: str):
    import dj_database_url
    import MySQLdb

    cfg = dj_database_url.parse(url)
    return MySQLdb.connect(host=cfg["HOST"], port=int(cfg["PORT"] or 3306), user=cfg["USER"],
                           passwd=cfg["PASSWORD"] or "", db=cfg["NAME"], charset="utf8mb4",
                           autocommit=True)


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds else float("inf")
