"""Fault scenarios: real producer, worker and reaper processes on the private MariaDB,
faults injected while they run, and every message accounted for afterwards.

Used by the short forms in ``tests/faults`` and by ``make soak`` (tests/faults/soak.py).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path

import MySQLdb

from tests.faults.injectors import Fault, Injection
from tests.faults.server import PrivateMariaDB

ROOT = Path(__file__).resolve().parents[2]
PENDING = (1, 2, 3, 5)  # ready, scheduled, claimed, waiting
DEAD = 4


@dataclass
class Report:
    scenario: str
    messages: int
    seconds: float = 0.0
    lost: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    send_errors: int = 0
    extra_stored: int = 0
    faults: list[Fault] = field(default_factory=list)
    latency: dict[str, float] = field(default_factory=dict)
    latency_in_faults: dict[str, float] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def recoveries(self) -> list[float]:
        return [f.recovery for f in self.faults if f.recovery is not None]

    def row(self) -> dict[str, object]:
        rec = self.recoveries
        return {
            "scenario": self.scenario, "messages": self.messages, "lost": self.lost,
            "duplicates": self.duplicates, "dead_lettered": self.dead_lettered,
            "send_errors": self.send_errors, "faults": len(self.faults),
            "recovery_median_s": round(statistics.median(rec), 3) if rec else None,
            "recovery_max_s": round(max(rec), 3) if rec else None,
            "latency_p50_ms": self.latency.get("p50"), "latency_p99_ms": self.latency.get("p99"),
            "latency_max_ms": self.latency.get("max"),
            "latency_in_faults_p99_ms": self.latency_in_faults.get("p99"),
            "seconds": round(self.seconds, 1), **self.notes,
        }


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)

    return {"p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "max": round(ordered[-1] * 1000, 1)}


class Cluster:
    """The processes of one scenario, and SQL to watch them, on the private server."""

    def __init__(self, server: PrivateMariaDB, workdir: Path) -> None:
        self.server = server
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
                    "DATABASE_URL": server.url, "PYTHONUNBUFFERED": "1"}
        self.env.pop("DJQUEUE_TEST_DB_NAME", None)
        self.processes: list[subprocess.Popen] = []
        self._names = 0

    # Processes

    def manage(self, *args: str) -> str:
        done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=300)
        if done.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def python(self, code: str) -> str:
        return self.manage("shell", "-c", code)

    def spawn(self, role: str, argv: list[str]) -> subprocess.Popen:
        self._names += 1
        log = (self.workdir / f"{self._names:03d}-{role}.log").open("wb")
        process = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        process.role = role  # type: ignore[attr-defined]
        process.log_path = Path(log.name)  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    def worker(self, queue: str, *options: str) -> subprocess.Popen:
        return self.spawn("worker", [sys.executable, str(ROOT / "manage.py"), "djqueue_worker",
                                     queue, *options])

    def reaper(self) -> subprocess.Popen:
        return self.spawn("reaper", [sys.executable, str(ROOT / "manage.py"), "djqueue_reaper"])

    def producer(self, queue: str, first: int, count: int, rate: float,
                 batch: int) -> subprocess.Popen:
        log = self.workdir / f"sent-{first}.log"
        process = self.spawn("producer", [
            sys.executable, str(ROOT / "tests" / "faults" / "producer.py"), "--queue", queue,
            "--first", str(first), "--count", str(count), "--rate", str(rate),
            "--batch", str(batch), "--log", str(log)])
        process.sent_log = log  # type: ignore[attr-defined]
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def alive(self, role: str) -> list[subprocess.Popen]:
        return [p for p in self.processes if p.role == role and p.poll() is None]  # type: ignore[attr-defined]

    # SQL

    def query(self, sql: str, params: tuple = (), retry_for: float = 60.0) -> list[tuple]:
        """A query on a fresh connection, retried while the server is down."""
        deadline = time.monotonic() + retry_for
        while True:
            try:
                conn = self.server.connect()
                try:
                    cursor = conn.cursor()
                    cursor.execute(sql, params)
                    return list(cursor.fetchall())
                finally:
                    conn.close()
            except MySQLdb.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def pending(self, queue_id: int) -> int:
        return self.query("SELECT COUNT(*) FROM djqueue_message WHERE queue_id = %s AND state IN "
                          "(1, 2, 3, 5)", (queue_id,))[0][0]

    def queue_id(self, name: str) -> int:
        return self.query("SELECT id FROM djqueue_queue WHERE name = %s", (name,))[0][0]

    def held_by_worker_pid(self, pid: int) -> tuple[str | None, int]:
        rows = self.query("SELECT id FROM djqueue_worker WHERE pid = %s", (pid,))
        if not rows:
            return None, 0
        owner = rows[0][0]
        return owner, self.query("SELECT COUNT(*) FROM djqueue_message WHERE owner = %s AND "
                                 "state = 3", (owner,))[0][0]

    def reset(self) -> None:
        """Empty djqueue's tables and the effects (cheaper than migrating again)."""
        tables = [r[0] for r in self.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'faults' AND "
            "(table_name LIKE 'djqueue%%' OR table_name = 'tests_effect')")]
        conn = self.server.connect()
        cursor = conn.cursor()
        cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
        for table in tables:
            cursor.execute(f"TRUNCATE TABLE `{table}`")
        conn.close()


def drain(cluster: Cluster, scenario: str, *, queue: str, count: int, rate: float,
          workers: int = 4, worker_options: tuple[str, ...] = ("-c", "4", "-b", "20"),
          producers: int = 2, batch: int = 20,
          inject: Callable[[Injection], None] | None = None,
          timeout: float | None = None) -> Report:
    """Produce ``count`` messages at ``rate`` while ``workers`` drain them, with ``inject``
    running beside; wait for every fault's recovery, then account."""
    report = Report(scenario, count)
    timeout = timeout if timeout is not None else 3 * count / rate + 300
    queue_id = cluster.queue_id(queue)
    cluster.reaper()
    for _ in range(workers):
        cluster.worker(queue, *worker_options)
    share = count // producers
    senders = [cluster.producer(queue, i * share, share if i < producers - 1 else
                                count - share * (producers - 1), rate / producers, batch)
               for i in range(producers)]
    inj = Injection(cluster, queue_id)
    report.faults = inj.faults
    injector = None
    started = time.monotonic()
    if inject is not None:
        injector = threading.Thread(target=inject, args=(inj,), daemon=True)
        injector.start()
    deadline = started + timeout
    while any(p.poll() is None for p in senders) and time.monotonic() < deadline:
        time.sleep(0.2)
    inj.produced.set()
    while time.monotonic() < deadline:
        if all(p.poll() is not None for p in senders) and cluster.pending(queue_id) == 0:
            break
        time.sleep(0.2)
    report.seconds = time.monotonic() - started
    inj.stop.set()
    if injector is not None:
        injector.join(180)
    inj.join(120)  # workers stay up until every fault's recovery is known
    cluster.stop_all()
    account(cluster, report, queue_id, [p.sent_log for p in senders])  # type: ignore[attr-defined]
    if time.monotonic() >= deadline:
        report.notes["timed_out"] = True
    return report


def account(cluster: Cluster, report: Report, queue_id: int, logs: list[Path]) -> None:
    """Every acknowledged send is finished (history) or dead-lettered; count the rest lost."""
    sent: dict[int, float] = {}
    id_to_n: dict[int, int] = {}
    for log in logs:
        for line in log.read_text().splitlines():
            parts = line.split(" ", 3)
            if parts[0] == "ok":
                n, pk, at = int(parts[1]), int(parts[2]), float(parts[3])
                id_to_n[pk] = n
                sent.setdefault(n, at)
            elif parts[0] == "err":
                report.send_errors += 1
    finished = {row[0] for row in cluster.query(
        "SELECT id FROM djqueue_history WHERE queue_id = %s", (queue_id,))}
    dead = {row[0] for row in cluster.query(
        "SELECT id FROM djqueue_message WHERE state = 4 AND (queue_id = %s OR origin_queue_id = %s)",
        (queue_id, queue_id))}
    pending = {row[0] for row in cluster.query(
        "SELECT id FROM djqueue_message WHERE queue_id = %s AND state IN (1, 2, 3, 5)",
        (queue_id,))}
    acknowledged = set(id_to_n)
    # Lost: stored (the producer was told so) and now nowhere. Still pending is not lost,
    # but a scenario that ends with messages pending did not finish (left_pending).
    report.lost = len(acknowledged - finished - dead - pending)
    report.dead_lettered = len(dead)
    report.extra_stored = len((finished | dead) - acknowledged)
    report.notes["left_pending"] = len(pending)
    effects = cluster.query("SELECT `key`, COUNT(*), MIN(at) FROM tests_effect GROUP BY `key`")
    runs = {key: (count, first) for key, count, first in effects}
    report.duplicates = sum(count - 1 for count, _ in runs.values())
    unrun = [pk for pk in acknowledged & finished if id_to_n[pk] not in runs]
    report.notes["finished_without_effect"] = len(unrun)
    latencies, in_faults = [], []
    windows = [(f.at, f.at + 5.0) for f in report.faults]
    for n, at in sent.items():
        if n in runs:
            done = runs[n][1].replace(tzinfo=UTC).timestamp()
            latencies.append(max(done - at, 0.0))
            if any(lo <= at <= hi for lo, hi in windows):
                in_faults.append(max(done - at, 0.0))
    report.latency = percentiles(latencies)
    report.latency_in_faults = percentiles(in_faults)


def write_json(reports: list[Report], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"reports": [
        {**r.row(), "fault_log": [vars(f) for f in r.faults]} for r in reports]}, indent=2,
        default=str))


def table(reports: list[Report]) -> str:
    head = (f"{'scenario':34} {'messages':>9} {'lost':>5} {'dupl.':>6} {'dead':>5} "
            f"{'faults':>6} {'recovery med/max s':>19} {'e2e p50/p99/max ms':>22} {'secs':>6}")
    lines = [head, "-" * len(head)]
    for r in reports:
        row = r.row()
        rec = (f"{row['recovery_median_s']}/{row['recovery_max_s']}"
               if row["recovery_max_s"] is not None else "-")
        lat = (f"{row['latency_p50_ms']}/{row['latency_p99_ms']}/{row['latency_max_ms']}"
               if r.latency else "-")
        lines.append(f"{r.scenario:34} {r.messages:>9,} {r.lost:>5} {r.duplicates:>6} "
                     f"{r.dead_lettered:>5} {len(r.faults):>6} {rec:>19} {lat:>22} "
                     f"{r.seconds:>6.0f}")
    return "\n".join(lines)
