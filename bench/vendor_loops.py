"""One database's rows of bench/databases.py: creating the bench database, filling
queues, the raw loops of its driver, and the djqueue runs measured against them.

What differs between the databases lives here, in :class:`VendorBench`: the
driver (mysqlclient, psycopg, sqlite3), its parameter marker, how a table is
copied, where a series of numbers comes from, and how a claim locks.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import pickup_latencies, wait_for_worker

ROOT = Path(__file__).resolve().parent.parent
WORKER = [sys.executable, str(ROOT / "manage.py"), "djqueue_worker"]
PAYLOAD = {"to": "someone@example.com", "subject": "x" * 60}
BODY = '{"to":"someone@example.com","subject":"' + "x" * 60 + '"}'
ROUNDS = 5
CLAIM = 100
MESSAGE_COLUMNS = ("queue_id, state, priority, visible_at, body, attempts, owner, lease_token, "
                   "sent_at")
HISTORY_COPY = ("INSERT INTO bench_raw_history (id, queue_id, outcome, priority, attempts, size,"
                " worker, group_key, sent_at, claimed_at, finished_at) SELECT id, queue_id, 1, "
                "priority, attempts, LENGTH(body), owner, group_key, sent_at, claimed_at, %s "
                "FROM bench_raw WHERE id IN ({ids})")


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


class VendorBench:
    def __init__(self, name: str, url: str) -> None:
        self.name, self.url = name, url
        self.vendor = {"mariadb": "mysql", "postgresql": "postgresql", "sqlite": "sqlite"}[name]
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
        if self.vendor == "mysql":
            return "", f"seq_1_to_{count}"
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

    def run_worker(self, queue: str, *options: str) -> float:
        """A burst worker to completion; returns its CPU seconds."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        process = subprocess.run([*WORKER, queue, "--burst", *options], cwd=ROOT,
                                 env={**os.environ}, check=False)
        if process.returncode != 0:
            raise RuntimeError(f"worker exited with {process.returncode}")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    # The rows

    def inserts(self, count: int) -> dict[str, float]:
        """``send`` one per commit against the driver's single-row insert, in turns."""
        import djqueue

        self.clear()
        conn = self.connect()
        cursor = conn.cursor()
        self.copy_table(cursor, "djqueue_message", "bench_raw")
        qid = djqueue.create_queue("bench", exist_ok=True).pk
        insert = self.sql(f"INSERT INTO bench_raw ({MESSAGE_COLUMNS}) "
                          "VALUES (%s, 1, 0, %s, %s, 0, '', '', %s)")
        loops = {"raw_insert_1": lambda: cursor.execute(insert, (qid, now, BODY, now)),
                 "send_1": lambda: djqueue.send("bench", PAYLOAD)}
        seconds = dict.fromkeys(loops, 0.0)
        calls = max(1, count // ROUNDS)
        for _ in range(ROUNDS):
            now = self.now()
            for key, call in loops.items():
                started = time.perf_counter()
                for _ in range(calls):
                    call()
                seconds[key] += time.perf_counter() - started
        cursor.execute("DROP TABLE bench_raw")
        conn.close()
        return {key: rate(calls * ROUNDS, spent) for key, spent in seconds.items()}

    def raw_claim_ack(self, count: int) -> dict[str, float]:
        """The driver's loop a worker batch needs, 100 a transaction (see bench/databases.py)."""
        import djqueue

        conn = self.connect()
        cursor = conn.cursor()
        self.copy_table(cursor, "djqueue_message", "bench_raw")
        self.copy_table(cursor, "djqueue_history", "bench_raw_history")
        qid = djqueue.create_queue("bench", exist_ok=True).pk
        prefix, source = self.numbers(count)
        now = self.now()
        cursor.execute(self.sql(f"{prefix}INSERT INTO bench_raw ({MESSAGE_COLUMNS}) "
                                f"SELECT %s, 1, 0, %s, %s, 0, '', '', %s FROM {source}"),
                       (qid, now, BODY, now))
        begin = "BEGIN IMMEDIATE" if self.vendor == "sqlite" else "BEGIN"
        lock = "" if self.vendor == "sqlite" else " FOR UPDATE SKIP LOCKED"
        # djqueue's own claim: ready is a state (a delayed message has another), and on
        # MariaDB the claim index is named (dialects.claim_index_hint; LIKE keeps its name)
        hint = " FORCE INDEX (djqueue_msg_claim)" if self.vendor == "mysql" else ""
        select = self.sql(f"SELECT id FROM bench_raw{hint} WHERE queue_id = %s AND state = 1 "
                          f"ORDER BY priority DESC, id LIMIT {CLAIM}{lock}")
        owner = "raw:" + uuid.uuid4().hex[:8]
        done: list[int] = []
        drained = 0
        started = time.perf_counter()
        while True:
            cursor.execute(begin)
            now = self.now()
            if done:
                ids = ",".join(map(str, done))
                cursor.execute(self.sql(HISTORY_COPY.format(ids=ids)), (now,))
                cursor.execute(f"DELETE FROM bench_raw WHERE id IN ({ids})")
                drained += len(done)
            cursor.execute(select, (qid,))
            done = [row[0] for row in cursor.fetchall()]
            if done:
                lease = self.now(30)
                cursor.execute(self.sql(
                    "UPDATE bench_raw SET state = 2, owner = %s, lease_token = %s, "
                    "attempts = attempts + 1, claimed_at = %s, visible_at = %s "
                    f"WHERE id IN ({','.join(map(str, done))})"),
                    (owner, uuid.uuid4().hex, now, lease))
            cursor.execute("COMMIT")
            if not done:
                break
        took = time.perf_counter() - started
        cursor.execute("DROP TABLE bench_raw")
        cursor.execute("DROP TABLE bench_raw_history")
        conn.close()
        return {"raw_claim_ack_100": rate(drained, took)}

    def drains(self, queue: str, variants: dict[str, tuple[str, ...]],
               fill: Callable[[], None]) -> dict[str, float]:
        """For each variant (key: worker options), ``fill`` the emptied tables and drain
        ``queue`` with a burst worker: its rate, and its CPU per message."""
        results = {}
        for key, options in variants.items():
            self.clear()
            fill()
            cpu = self.run_worker(queue, *options)
            found, drained = self.drain_rate()
            results[key] = found
            results[f"{key}_cpu_us"] = cpu / max(drained, 1) * 1e6
        self.clear()
        return results

    def workers(self, count: int) -> dict[str, float]:
        """``djqueue_worker bench`` at its defaults, ``-b 100`` and ``-b 500``."""
        return self.drains("bench", {"worker_defaults": (), "worker_b100": ("-b", "100"),
                                     "worker_b500": ("-b", "500")},
                           lambda: self.fill(count))

    def tasks(self, count: int) -> dict[str, float]:
        """The django.tasks worker (``djqueue_worker default``), defaults and ``-b 100``."""
        from django.db import transaction

        from bench.tasks import noop

        def enqueue() -> None:
            for start in range(0, count, 500):
                with transaction.atomic():
                    for _ in range(min(500, count - start)):
                        noop.enqueue(PAYLOAD)

        return self.drains("default", {"tasks_defaults": (), "tasks_b100": ("-b", "100")},
                           enqueue)

    def io_handlers(self, count: int) -> dict[str, float]:
        """Handlers that wait 10 ms, one worker with ``-c 32``: the limit is 3,200/s."""
        return self.drains("bench.io", {"io_c32": ("-c", "32")},
                           lambda: self.fill(count, "bench.io"))

    def admin_under_load(self, seconds: float = 15.0, rate: int = 1000) -> dict[str, float]:
        """The admin's pages (dashboard, messages, queues, history; server time through
        Django's test client) while two workers at their defaults drain and a producer
        process sends ``rate`` messages a second for ``seconds``; and how many
        "database is locked" errors appeared anywhere."""
        from django.contrib.auth.models import User
        from django.test import Client
        from django.urls import reverse

        self.clear()
        if not User.objects.filter(username="bench").exists():
            User.objects.create_superuser("bench", password="bench-pw")
        client = Client()
        client.login(username="bench", password="bench-pw")
        pages = [reverse(f"admin:djqueue_{name}_changelist")
                 for name in ("dashboard", "message", "queue", "history")]
        count = int(seconds * rate)
        produce = ("import time, djqueue\nstart = time.monotonic()\n"
                   f"for i in range({count}):\n    djqueue.send('bench', {{'n': i}})\n"
                   f"    pause = start + (i + 1) / {rate} - time.monotonic()\n"
                   "    if pause > 0: time.sleep(pause)\n")
        manage = [sys.executable, str(ROOT / "manage.py")]
        times, locked, failed = [], 0, 0
        with contextlib.ExitStack() as stack:
            logs = [stack.enter_context(tempfile.TemporaryFile()) for _ in range(3)]
            workers = [subprocess.Popen([*manage, "djqueue_worker", "bench"], cwd=ROOT,
                                        stdout=log, stderr=subprocess.STDOUT)
                       for log in logs[:2]]
            producer = subprocess.Popen([*manage, "shell", "-c", produce], cwd=ROOT,
                                        stdout=logs[2], stderr=subprocess.STDOUT)
            try:
                while producer.poll() is None:
                    for page in pages:
                        started = time.perf_counter()
                        response = client.get(page)
                        times.append((time.perf_counter() - started) * 1000)
                        failed += response.status_code != 200
                        locked += b"database is locked" in response.content
            finally:
                for process in workers:
                    process.send_signal(signal.SIGTERM)
                    process.wait(60)
            for log in logs:
                log.seek(0)
                locked += log.read().count(b"database is locked")
        times.sort()
        self.clear()
        return {"admin_p50_ms": times[len(times) // 2],
                "admin_p95_ms": times[min(len(times) - 1, int(len(times) * 0.95))],
                "admin_locked_errors": float(locked), "admin_failed": float(failed),
                "admin_producer_exit": float(producer.returncode)}

    def idle_count(self) -> int | None:
        """The server's statements (MariaDB) or transactions (PostgreSQL) so far."""
        from django.db import connection

        with connection.cursor() as cursor:
            if self.vendor == "mysql":
                cursor.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
                return int(cursor.fetchone()[1])
            if self.vendor == "postgresql":
                cursor.execute("SELECT pg_stat_clear_snapshot()")
                cursor.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                               "WHERE datname = current_database()")
                return int(cursor.fetchone()[0])
        return None

    def pickup(self, samples: int, window: float, tasks: bool = False) -> dict[str, float]:
        """An idle worker at its defaults: what it costs a second, and how soon it picks
        up a send (``tasks``: a django.tasks enqueue, served by ``djqueue_worker
        default``; its keys start with ``tasks_``)."""
        import djqueue
        from bench.tasks import noop
        from djqueue.models import Worker

        self.clear()
        process = subprocess.Popen([*WORKER, "default" if tasks else "bench"], cwd=ROOT,
                                   env={**os.environ})
        try:
            wait_for_worker()
            time.sleep(2)  # settle into idle polling
            before = self.idle_count()
            time.sleep(0 if tasks else window)
            after = self.idle_count()
            latencies = pickup_latencies(samples, (lambda: noop.enqueue(PAYLOAD)) if tasks
                                         else (lambda: djqueue.send("bench", PAYLOAD)))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
            Worker.objects.all().delete()  # gone at its exit; the next measure waits for its own
        self.clear()
        prefix = "tasks_" if tasks else ""
        found = {f"{prefix}{key}": value for key, value in latencies.items()}
        if before is not None and after is not None and not tasks:
            # minus this process's own reads: two statements or transactions
            found["idle_per_s"] = (after - before - 2) / window
        return found
