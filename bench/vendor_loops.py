"""The rows of bench/databases.py on one database: ``send`` and the raw insert, the raw
claim+ack loop, the workers at their defaults and fixed claim sizes, django.tasks,
10 ms handlers, the admin under load, and an idle worker's cost and pickup.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

from common import pickup_latencies, quiet_round_trips, rate, wait_for_worker
from measures import django_task_cost
from vendor_db import BODY, MESSAGE_COLUMNS, PAYLOAD, ROOT, WORKER, VendorDatabase

#: Rounds of the insert comparison (raw and send take turns, as in measures.inserts).
ROUNDS = 5
#: Messages a raw claim takes.
CLAIM = 100
HISTORY_COPY = ("INSERT INTO bench_raw_history (id, queue_id, outcome, priority, attempts, size,"
                " worker, group_key, sent_at, claimed_at, finished_at) SELECT id, queue_id, 1, "
                "priority, attempts, LENGTH(body), owner, group_key, sent_at, claimed_at, %s "
                "FROM bench_raw WHERE id IN ({ids})")


#: Turns of the django.tasks-against-plain comparison (``VendorBench.task_turns``).
TURNS = 3


def enqueue_tasks(count: int) -> None:
    """``count`` no-op tasks by ``task.enqueue``, 500 a transaction."""
    from django.db import transaction

    from bench.tasks import noop

    for start in range(0, count, 500):
        with transaction.atomic():
            for _ in range(min(500, count - start)):
                noop.enqueue(PAYLOAD)


class VendorBench(VendorDatabase):
    # The rows

    def _raw_insert(self) -> tuple[object, object, int, str]:
        """Emptied tables, a raw autocommit connection and its cursor, the ``bench``
        queue's id, and the driver's single-row insert into ``bench_raw`` (a copy of
        the message table) that the send rows are measured against."""
        import djqueue

        self.clear()
        conn = self.connect()
        cursor = conn.cursor()
        self.copy_table(cursor, "djqueue_message", "bench_raw")
        qid = djqueue.create_queue("bench", exist_ok=True).pk
        insert = self.sql(f"INSERT INTO bench_raw ({MESSAGE_COLUMNS}) "
                          "VALUES (%s, 1, 0, %s, %s, 0, '', '', %s)")
        return conn, cursor, qid, insert

    def inserts(self, count: int) -> dict[str, float]:
        """``send`` one per commit against the driver's single-row insert, in turns (on
        PostgreSQL also the insert unprepared, as Django runs statements by default)."""
        import djqueue

        conn, cursor, qid, insert = self._raw_insert()
        loops = {"raw_insert_1": lambda: cursor.execute(insert, (qid, now, BODY, now)),
                 "send_1": lambda: djqueue.send("bench", PAYLOAD)}
        if self.vendor == "postgresql":
            # psycopg prepares a statement run five times; Django turns that off unless
            # OPTIONS ask (for poolers), so send runs unprepared, as this loop does.
            unprepared = self.connect()
            unprepared.prepare_threshold = None
            other = unprepared.cursor()
            loops["raw_insert_1_unprepared"] = lambda: other.execute(
                insert, (qid, now, BODY, now))
            # And send as a project that asks for prepared statements gets it: OPTIONS
            # ``prepare_threshold`` (djqueue follows Django's setting; see
            # djqueue.storage.fastpath.driver_statements.insert_returning_id).
            loops["send_1_prepared"] = loops["send_1"]
            # The same prepared insert into a copy that keeps the message table's foreign
            # key to its queue (bench_raw has none), declared as Django declares it: how
            # much of the gap is the key's check, which locks the queue's row.
            self.copy_table(cursor, "djqueue_message", "bench_raw_keyed")
            cursor.execute("ALTER TABLE bench_raw_keyed ADD FOREIGN KEY (queue_id) REFERENCES "
                           "djqueue_queue (id) DEFERRABLE INITIALLY DEFERRED")
            keyed = insert.replace("bench_raw", "bench_raw_keyed", 1)
            loops["raw_insert_1_queue_key"] = lambda: cursor.execute(
                keyed, (qid, now, BODY, now))
        seconds = dict.fromkeys(loops, 0.0)
        calls = max(1, count // ROUNDS)
        for _ in range(ROUNDS):
            now = self.now()
            for key, call in loops.items():
                with self._prepared(key == "send_1_prepared"):
                    started = time.perf_counter()
                    for _ in range(calls):
                        call()
                    seconds[key] += time.perf_counter() - started
        cursor.execute("DROP TABLE bench_raw")
        if self.vendor == "postgresql":
            cursor.execute("DROP TABLE bench_raw_keyed")
            unprepared.close()
        conn.close()
        return {key: rate(calls * ROUNDS, spent) for key, spent in seconds.items()}

    @contextlib.contextmanager
    def _prepared(self, prepared: bool):
        """With ``prepared``, Django's connection reopened with ``OPTIONS``
        ``prepare_threshold`` 5 (psycopg's own default), as a project sets it, and warmed
        past that threshold; after it, reopened as it was."""
        if not prepared:
            yield
            return
        from django.db import connection

        import djqueue

        options = connection.settings_dict.setdefault("OPTIONS", {})
        had, before = "prepare_threshold" in options, options.get("prepare_threshold")
        options["prepare_threshold"] = 5
        connection.close()
        for _ in range(6):
            djqueue.send("bench", PAYLOAD)
        try:
            yield
        finally:
            if had:
                options["prepare_threshold"] = before
            else:
                del options["prepare_threshold"]
            connection.close()

    def quiet_sends(self, samples: int, pause: float = 1.2) -> dict[str, float]:
        """A process that sends less often than its caches last (the queue's row,
        ``QUEUE_CACHE_TTL``, and the workers' wake addresses, ``WAKE_REFRESH``: 1 s
        each), with an idle worker waiting: ``send`` and the driver's single insert in
        turns, each ``pause`` seconds after the last; the medians, in ms."""
        import djqueue
        from djqueue.models import Worker

        conn, cursor, qid, insert = self._raw_insert()
        process = subprocess.Popen([*WORKER, "bench"], cwd=ROOT, env={**os.environ})
        sends, inserts = [], []
        try:
            wait_for_worker()
            for _ in range(samples):
                time.sleep(pause)
                started = time.perf_counter()
                djqueue.send("bench", PAYLOAD)
                sends.append(time.perf_counter() - started)
                time.sleep(pause)
                now = self.now()
                started = time.perf_counter()
                cursor.execute(insert, (qid, now, BODY, now))
                inserts.append(time.perf_counter() - started)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
            Worker.objects.all().delete()
            cursor.execute("DROP TABLE bench_raw")
            conn.close()
        self.clear()
        return {"quiet_send_ms": statistics.median(sends) * 1000,
                "quiet_raw_insert_ms": statistics.median(inserts) * 1000}

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
               fill: Callable[[], None], env: dict[str, dict[str, str]] | None = None,
               ) -> dict[str, float]:
        """For each variant (key: worker options; ``env``: by key, what the worker's
        environment adds), ``fill`` the emptied tables and drain ``queue`` with a burst
        worker: its rate, and its CPU per message."""
        results = {}
        for key, options in variants.items():
            results[key], results[f"{key}_cpu_us"] = self._drain(
                queue, options, fill, (env or {}).get(key))
        self.clear()
        return results

    def _drain(self, queue: str, options: tuple[str, ...], fill: Callable[[], None],
               env: dict[str, str] | None = None) -> tuple[float, float]:
        """``fill`` the emptied tables and drain ``queue`` with a burst worker: its rate,
        and its CPU µs per message (the tables are left as the drain left them)."""
        self.clear()
        fill()
        cpu = self.run_worker(queue, *options, env=env)
        found, drained = self.drain_rate()
        return found, cpu / max(drained, 1) * 1e6

    def workers(self, count: int) -> dict[str, float]:
        """``djqueue_worker bench`` at its defaults, ``-b 100`` and ``-b 500``."""
        return self.drains("bench", {"worker_defaults": (), "worker_b100": ("-b", "100"),
                                     "worker_b500": ("-b", "500")},
                           lambda: self.fill(count))

    def tasks(self, count: int) -> dict[str, float]:
        """The django.tasks worker (``djqueue_worker default``), defaults and ``-b 100``;
        and at defaults in a project whose LOGGING sets the ``django.tasks`` logger to
        WARNING, which should run as fast as the defaults (where the worker holds the
        Tasks framework's INFO records of each run back itself)."""
        found = self.drains("default", {"tasks_defaults": (), "tasks_b100": ("-b", "100"),
                                        "tasks_quiet_log": ()}, lambda: enqueue_tasks(count),
                            env={"tasks_quiet_log": {"DJQUEUE_BENCH_TASKS_LOG": "WARNING"}})
        # What django.tasks itself asks per task, hot in this process: with the plain
        # worker's time a message, the ratio's estimate with nothing of djqueue's added.
        found.update(django_task_cost(min(count, 20_000), empty=self.clear))
        return found

    def task_turns(self, count: int, turns: int = TURNS) -> dict[str, float]:
        """The django.tasks worker against the plain worker, both at their defaults, in
        turns (a plain drain of ``count``, then ``count`` tasks, ``turns`` times): the
        median of the turns' ratios, and their spread.

        Why turns: the ``workers`` and ``tasks`` rows run a minute or more apart, and a
        host's speed can drift by a fifth in that time (docs/performance.md has this
        host's figures); a ratio of the two rows takes the drift for the code's. As
        the insert rows take turns, a slow spell here falls on both."""
        plain, tasks, ratios = [], [], []
        for _ in range(turns):
            plain.append(self._drain("bench", (), lambda: self.fill(count))[0])
            tasks.append(self._drain("default", (), lambda: enqueue_tasks(count))[0])
            ratios.append(tasks[-1] / plain[-1])
        self.clear()
        return {"turns_worker": statistics.median(plain), "turns_tasks": statistics.median(tasks),
                "turns_ratio": statistics.median(ratios), "turns_ratio_min": min(ratios),
                "turns_ratio_max": max(ratios)}

    def exactly_once(self, count: int) -> dict[str, float]:
        """``djqueue_worker bench.once`` at its defaults on an ``exactly_once`` queue: each
        handler runs inside its message's own transaction, with the ack (no target; a
        commit a message is what bounds it)."""
        import djqueue

        djqueue.create_queue("bench.once", exactly_once=True, exist_ok=True)
        return self.drains("bench.once", {"exactly_once_defaults": ()},
                           lambda: self.fill(count, "bench.once"))

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
            if not tasks:  # once a database, the worker still idle
                latencies.update(quiet_round_trips(samples, self.connect()))
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
