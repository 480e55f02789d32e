"""One database of bench/databases.py: created anew, with Django set up and migrated on
it, and what differs from one vendor to the next.

:class:`VendorDatabase` holds the differences: the driver (mysqlclient, psycopg,
sqlite3), its parameter marker, how a table is copied, where a series of numbers
comes from, and how the queue tables are emptied and filled. The rows measured
on it are in bench/vendor_loops.py.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import rate

ROOT = Path(__file__).resolve().parent.parent
WORKER = [sys.executable, str(ROOT / "manage.py"), "djqueue_worker"]
PAYLOAD = {"to": "someone@example.com", "subject": "x" * 60}
BODY = '{"to":"someone@example.com","subject":"' + "x" * 60 + '"}'
MESSAGE_COLUMNS = ("queue_id, state, priority, visible_at, body, attempts, owner, lease_token, "
                   "sent_at")


class VendorDatabase:
    def __init__(self, name: str, url: str) -> None:
        self.name, self.url = name, url
        self.vendor = {"mariadb": "mysql", "mysql": "mysql", "postgresql": "postgresql",
                       "sqlite": "sqlite"}[name]
        self._create()
        os.environ["DATABASE_URL"] = url
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        import djqueue

        for queue in ("bench", "bench.io"):
            djqueue.create_queue(queue, exist_ok=True)

    # The database itself

    def _create(self) -> None:
        if self.vendor == "sqlite":
            self.drop()
            return
        with self._server() as admin:
            admin.cursor().execute("DROP DATABASE IF EXISTS djq_bench" + (
                " WITH (FORCE)" if self.vendor == "postgresql" else ""))
            admin.cursor().execute("CREATE DATABASE djq_bench" + (
                " CHARACTER SET utf8mb4" if self.vendor == "mysql" else ""))

    def drop(self) -> None:
        if self.vendor == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(self.url.removeprefix("sqlite:///") + suffix).unlink(missing_ok=True)
            return
        from django.db import connections

        connections.close_all()
        with self._server() as admin:
            admin.cursor().execute("DROP DATABASE IF EXISTS djq_bench" + (
                " WITH (FORCE)" if self.vendor == "postgresql" else ""))

    def _server(self):
        """A connection to the server's own database (to create and drop the bench's)."""
        return self.connect(database={"mysql": "mysql", "postgresql": "postgres"}[self.vendor])

    def connect(self, database: str | None = None):
        """A raw autocommit connection of the database's own driver."""
        import dj_database_url

        if self.vendor == "sqlite":
            import sqlite3

            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), isolation_level=None,
                                   timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            return conn
        cfg = dj_database_url.parse(self.url)
        if self.vendor == "mysql":
            import MySQLdb

            conn = MySQLdb.connect(host=cfg["HOST"], port=int(cfg["PORT"] or 3306),
                                   user=cfg["USER"], passwd=cfg["PASSWORD"] or "",
                                   db=database or cfg["NAME"], charset="utf8mb4", autocommit=True)
            conn.cursor().execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            return conn
        import psycopg

        return psycopg.connect(host=cfg["HOST"], port=int(cfg["PORT"] or 5432),
                               user=cfg["USER"] or "postgres", dbname=database or cfg["NAME"],
                               autocommit=True)

    def sql(self, statement: str) -> str:
        """``statement`` with the driver's parameter marker."""
        return statement.replace("%s", "?") if self.vendor == "sqlite" else statement

    def now(self, later: float = 0.0):
        """The time ``later`` seconds from now, as the driver takes it."""
        at = datetime.now(UTC) + timedelta(seconds=later)
        if self.vendor == "sqlite":  # as Django stores it
            return at.replace(tzinfo=None).isoformat(" ")
        return at

    def numbers(self, count: int) -> tuple[str, str]:
        """(a prefix, a FROM clause) giving ``count`` rows."""
        if self.name == "mariadb":
            return "", f"seq_1_to_{count}"  # the sequence engine
        if self.vendor == "mysql":
            # MySQL has no sequence engine, and its recursive CTE stops at 1,000 rows
            # unless a session variable says otherwise: as many decimal digits joined as
            # ``count`` has.
            digits = "(" + " UNION ALL ".join(f"SELECT {d} AS d" for d in range(10)) + ")"
            places = range(len(str(max(count - 1, 1))))
            number = " + ".join(f"d{p}.d * {10 ** p}" for p in places)
            joined = ", ".join(f"{digits} AS d{p}" for p in places)
            return "", f"(SELECT 1 + {number} AS x FROM {joined}) AS seq WHERE x <= {count}"
        if self.vendor == "postgresql":
            return "", f"generate_series(1, {count})"
        return (f"WITH RECURSIVE seq(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM seq "
                f"WHERE x < {count}) "), "seq"

    def copy_table(self, cursor, table: str, copy: str) -> None:
        """Create ``copy`` with ``table``'s columns and indexes (not its foreign keys)."""
        cursor.execute(f"DROP TABLE IF EXISTS {copy}")
        if self.vendor == "mysql":
            cursor.execute(f"CREATE TABLE {copy} LIKE {table}")
        elif self.vendor == "postgresql":
            cursor.execute(f"CREATE TABLE {copy} (LIKE {table} INCLUDING ALL)")
        else:
            cursor.execute("SELECT type, sql FROM sqlite_master WHERE tbl_name = ? AND sql "
                           "IS NOT NULL ORDER BY type DESC", (table,))
            for number, (kind, statement) in enumerate(cursor.fetchall()):
                statement = statement.replace(f'"{table}"', f'"{copy}"')
                if kind == "index":
                    statement = re.sub(r'INDEX "[^"]+"', f'INDEX "{copy}_{number}"', statement)
                cursor.execute(statement)

    def clear(self) -> None:
        """Empty the message, history and task tables."""
        from django.db import connection

        tables = ("djqueue_message", "djqueue_history", "djqueue_taskrecord")
        with connection.cursor() as cursor:
            if self.vendor == "mysql":
                cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
                for table in tables:
                    cursor.execute(f"TRUNCATE TABLE {table}")
                cursor.execute("SET FOREIGN_KEY_CHECKS = 1")
            elif self.vendor == "postgresql":
                cursor.execute(f"TRUNCATE {', '.join(tables)}")
            else:
                for table in tables:
                    cursor.execute(f"DELETE FROM {table}")

    def fill(self, count: int, queue: str = "bench") -> None:
        """``count`` ready messages in one statement."""
        from django.db import connection

        import djqueue

        qid = djqueue.create_queue(queue, exist_ok=True).pk
        prefix, source = self.numbers(count)
        now = connection.ops.adapt_datetimefield_value(datetime.now(UTC))
        with connection.cursor() as cursor:
            cursor.execute(f"{prefix}INSERT INTO djqueue_message ({MESSAGE_COLUMNS}) "
                           f"SELECT %s, 1, 0, %s, %s, 0, '', '', %s FROM {source}",
                           [qid, now, BODY, now])

    def drain_rate(self) -> tuple[float, int]:
        """Messages per second from the first claim to the last finish."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT COUNT(*), MIN(claimed_at), MAX(finished_at) "
                           "FROM djqueue_history")
            count, first, last = cursor.fetchone()
        if not count:
            return 0.0, 0
        if isinstance(first, str):  # SQLite
            first, last = datetime.fromisoformat(first), datetime.fromisoformat(last)
        return rate(count, (last - first).total_seconds()), count

    def run_worker(self, queue: str, *options: str, env: dict[str, str] | None = None,
                   ) -> float:
        """A burst worker to completion (``env``: added to its environment); returns its
        CPU seconds."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        process = subprocess.run([*WORKER, queue, "--burst", *options], cwd=ROOT,
                                 env={**os.environ, **(env or {})}, check=False)
        if process.returncode != 0:
            raise RuntimeError(f"worker exited with {process.returncode}")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
