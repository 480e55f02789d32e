"""Measure one peer; prints one JSON object. Runs in .venv-bench (see bench/suite.py).

    .venv-bench/bin/python -m bench.peers.run PEER --messages N --url URL

PEER: tasks-db, dj-queue, django-ox (django.tasks backends; MariaDB, PostgreSQL or
SQLite by URL), procrastinate, oban (Oban for Python) and pgqueuer (PostgreSQL), huey
(SQLite), celery (the local Redis).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PAYLOAD = {"to": "someone@example.com", "subject": "x" * 60}
PICKUPS = 20


def timed_rate(count: int, action) -> float:
    started = time.perf_counter()
    for i in range(count):
        action(i)
    return count / (time.perf_counter() - started)


def spawn(args: list[str], log: str, extra: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a peer's worker, its output in bench/results/<log>.log. The environment
    is this process's minus DJANGO_SETTINGS_MODULE unless it is the peer's own (Celery
    would otherwise load djqueue's settings, which this venv cannot import)."""
    env = {**os.environ, **(extra or {})}
    if env.get("DJANGO_SETTINGS_MODULE") != "bench.peers.settings":
        env.pop("DJANGO_SETTINGS_MODULE", None)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{log}.log", "ab") as sink:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def enqueue_paced(enqueue_one: Callable[[], object]) -> None:
    """Pickup's enqueues: once the worker has started and gone idle (3 s), PICKUPS
    jobs one by one, 0.25 to 0.35 s apart, so each finds the worker idle."""
    time.sleep(3)
    for _ in range(PICKUPS):
        enqueue_one()
        time.sleep(0.25 + (time.time() % 0.1))


# The django.tasks peers: django-tasks-db, dj-queue, django-ox

@dataclass(frozen=True)
class DjangoPeer:
    """How to run and read one django.tasks peer. ``variants``: (name, worker command,
    backend OPTIONS) for its defaults and its fastest documented settings; ``idle``
    is the command an idle worker runs for the pickup measure."""

    model: str
    started: str
    finished: str
    enqueued: str
    variants: tuple[tuple[str, tuple[str, ...], dict], ...]
    idle: tuple[str, ...]
    idle_options: dict = field(default_factory=dict)


#: dj-queue's tuned runtime, from its README: the async mode, 8 threads a worker.
DJ_QUEUE_TUNED = {"mode": "async", "workers": [{"queues": "*", "threads": 8, "processes": 1,
                                                "polling_interval": 0.1}]}
DJANGO_PEERS = {
    "tasks-db": DjangoPeer(
        "django_tasks_database.DBTaskResult", "started_at", "finished_at", "enqueued_at",
        (("defaults", ("db_worker", "--batch"), {}),
         ("tuned", ("db_worker", "--batch", "--no-startup-delay", "--interval", "0.1"), {})),
        ("db_worker", "--no-startup-delay", "--interval", "0.1")),
    "dj-queue": DjangoPeer(
        "dj_queue.Job", "finished_at", "finished_at", "created_at",
        (("defaults", ("dj_queue", "--only-work"), {}),
         ("tuned", ("dj_queue", "--only-work"), DJ_QUEUE_TUNED)),
        ("dj_queue", "--only-work"), DJ_QUEUE_TUNED),
    "django-ox": DjangoPeer(
        "django_ox.OxTask", "started_at", "finished_at", "enqueued_at",
        (("defaults", ("ox_worker", "--batch"), {}),
         ("tuned", ("ox_worker", "--batch", "--concurrency", "4", "--interval", "0.1"), {})),
        ("ox_worker", "--interval", "0.1")),
}


def fresh_database(url: str) -> None:
    """Create the peer's database anew on its server (MariaDB or PostgreSQL), or remove
    its SQLite file."""
    from dj_database_url import parse

    cfg = parse(url)
    name = cfg["NAME"]
    if "sqlite" in cfg["ENGINE"]:
        for path in (name, f"{name}-wal", f"{name}-shm", f"{name}-journal"):
            Path(path).unlink(missing_ok=True)
    elif "mysql" in cfg["ENGINE"]:
        import MySQLdb

        admin = MySQLdb.connect(host=cfg["HOST"], port=int(cfg["PORT"] or 3306),
                                user=cfg["USER"], passwd=cfg["PASSWORD"] or "")
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        admin.cursor().execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    else:
        import psycopg

        with psycopg.connect(host=cfg["HOST"], port=int(cfg["PORT"] or 5432),
                             user=cfg["USER"] or "postgres", dbname="postgres",
                             autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {name}")


def django_peer(peer: str, messages: int, url: str) -> dict:
    """Enqueue one by one, drain a backlog at each variant, then pickup from an idle worker."""
    spec = DJANGO_PEERS[peer]
    fresh_database(url)
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="bench.peers.settings",
                      PEER=peer)
    import django

    django.setup()
    from django.apps import apps
    from django.core.management import call_command
    from django.db import transaction

    from bench.peers.tasks import noop

    call_command("migrate", verbosity=0)
    model = apps.get_model(spec.model)
    manage = [sys.executable, "-m", "django"]
    result: dict = {"enqueue": timed_rate(min(messages, 2000), lambda i: noop.enqueue(PAYLOAD))}
    for name, command, options in spec.variants:
        model.objects.all().delete()
        for start in range(0, messages, 500):
            with transaction.atomic():
                for _ in range(min(500, messages - start)):
                    noop.enqueue(PAYLOAD)
        worker = spawn([*manage, *command], f"peer-{peer}",
                       {"PEER_OPTIONS": json.dumps(options)})
        _wait_finished(model, spec, messages, worker)
        stop(worker)
        result[f"drain_{name}"] = _db_rate(model.objects.all(), spec)
    result["drain_1"] = max(result[f"drain_{name}"] for name, _c, _o in spec.variants)
    model.objects.all().delete()
    idle = spawn([*manage, *spec.idle], f"peer-{peer}",
                 {"PEER_OPTIONS": json.dumps(spec.idle_options)})
    enqueue_paced(lambda: noop.enqueue(PAYLOAD))
    _wait_finished(model, spec, PICKUPS, idle, timeout=30)
    stop(idle)
    result["pickup_ms"] = [
        (getattr(r, spec.started) - getattr(r, spec.enqueued)).total_seconds() * 1000
        for r in model.objects.exclude(**{spec.started: None})]
    return result


def _wait_finished(model, spec: DjangoPeer, count: int, worker: subprocess.Popen,
                   timeout: float = 900) -> None:
    _wait_rows(f"{spec.model} finished", lambda: model.objects.exclude(
        **{spec.finished: None}).count(), count, worker, timeout)


def _wait_rows(what: str, count, target: int, worker: subprocess.Popen,
               timeout: float = 900) -> None:
    """Wait until ``count()`` reaches ``target``; fail if the worker exits first."""
    deadline = time.monotonic() + timeout
    while count() < target:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {target} {what} in {timeout} s")
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.returncode} before "
                               f"{target} {what}")
        time.sleep(0.1)


def _db_rate(results, spec: DjangoPeer) -> float:
    from django.db.models import Max, Min

    span = results.aggregate(first=Min(spec.started), last=Max(spec.finished))
    count = results.exclude(**{spec.finished: None}).count()
    return count / (span["last"] - span["first"]).total_seconds()


# procrastinate (PostgreSQL)

def procrastinate(messages: int, url: str) -> dict:
    """procrastinate's worker (its CLI, one process) at its defaults, with its log
    level at WARNING (by default it logs two INFO lines a job), and with that and
    ``--concurrency 8``; rates and pickup from its events table."""
    fresh_database(url)
    os.environ["DATABASE_URL"] = url
    from bench.peers.procrastinate_app import app, noop

    command = [sys.executable, "-m", "procrastinate", "--app=bench.peers.procrastinate_app.app"]
    quiet = ("--log-level", "warning")
    variants = (("defaults", (), ()), ("tuned", quiet, ()),
                ("tuned_c8", quiet, ("--concurrency", "8")))
    with app.open():
        app.schema_manager.apply_schema()
        result: dict = {"enqueue": timed_rate(min(messages, 2000),
                                              lambda i: noop.defer(payload=PAYLOAD))}
        for name, before, options in variants:
            _procrastinate_sql("TRUNCATE procrastinate_jobs CASCADE")
            for start in range(0, messages, 1000):
                noop.batch_defer(*[{"payload": PAYLOAD}] * min(1000, messages - start))
            worker = spawn([*command, *before, "worker", "--one-shot", *options],
                           "peer-procrastinate")
            if worker.wait(900) != 0:
                raise RuntimeError("procrastinate's worker failed (bench/results/"
                                   "peer-procrastinate.log)")
            count, first, last = _procrastinate_sql(
                "SELECT count(*) FILTER (WHERE type = 'succeeded'), "
                "min(at) FILTER (WHERE type = 'started'), "
                "max(at) FILTER (WHERE type = 'succeeded') FROM procrastinate_events")[0]
            result[f"drain_{name}"] = count / (last - first).total_seconds()
        result["drain_1"] = max(result[f"drain_{name}"] for name, _b, _o in variants)
        _procrastinate_sql("TRUNCATE procrastinate_jobs CASCADE")
        idle = spawn([*command, *quiet, "worker"], "peer-procrastinate")
        enqueue_paced(lambda: noop.defer(payload=PAYLOAD))
        deadline = time.monotonic() + 30
        while (_procrastinate_sql("SELECT count(*) FROM procrastinate_jobs WHERE status = "
                                  "'succeeded'")[0][0] < PICKUPS
               and time.monotonic() < deadline):
            time.sleep(0.1)
        stop(idle)
        result["pickup_ms"] = [row[0] * 1000 for row in _procrastinate_sql(
            "SELECT EXTRACT(EPOCH FROM s.at - d.at)::float FROM procrastinate_events d "
            "JOIN procrastinate_events s ON s.job_id = d.job_id AND s.type = 'started' "
            "WHERE d.type = 'deferred'")]
    return result


def _procrastinate_sql(sql: str) -> list[tuple]:
    from bench.peers.procrastinate_app import conninfo

    return _postgresql_rows(conninfo(), sql)


def _postgresql_rows(conninfo: str, sql: str) -> list[tuple]:
    """The rows of ``sql`` (none for a statement without) on a connection of its own."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        cursor = conn.execute(sql)
        return cursor.fetchall() if cursor.description else []


# Oban for Python (PostgreSQL)

#: ``oban start``'s variants: the queue limit of its README's example (10) with its
#: default log level, which logs every job at INFO; the same at WARNING; and a limit
#: of 50 with a pool of 20 connections (its default is 10).
OBAN_VARIANTS = (("defaults", ("--queues", "default:10")),
                 ("tuned", ("--queues", "default:10", "--log-level", "WARNING")),
                 ("tuned_50", ("--queues", "default:50", "--pool-max-size", "20",
                               "--log-level", "WARNING")))


def oban(messages: int, url: str) -> dict:
    """Oban's worker (its CLI, one process) at each of OBAN_VARIANTS; rates and pickup
    from its jobs table (``attempted_at``, ``completed_at``)."""
    import asyncio

    fresh_database(url)
    os.environ["DATABASE_URL"] = url
    from bench.peers.oban_app import dsn

    # Only this folder is searched for cron workers (by default Oban greps the whole
    # working directory, venvs included, and imports what it finds).
    command = [sys.executable, "-m", "oban", "start", "--dsn", dsn(), "--cron-paths",
               "bench/peers"]
    result: dict = asyncio.run(_oban_enqueue_alone(min(messages, 2000)))
    for name, options in OBAN_VARIANTS:
        _oban_sql("TRUNCATE oban_jobs")
        asyncio.run(_oban_backlog(messages))
        worker = spawn([*command, *options], "peer-oban")
        _wait_rows("completed jobs", _oban_completed, messages, worker)
        stop(worker)
        count, first, last = _oban_sql(
            "SELECT count(*), min(attempted_at), max(completed_at) FROM oban_jobs "
            "WHERE state = 'completed'")[0]
        result[f"drain_{name}"] = count / (last - first).total_seconds()
    result["drain_1"] = max(result[f"drain_{name}"] for name, _o in OBAN_VARIANTS)
    _oban_sql("TRUNCATE oban_jobs")
    idle = spawn([*command, *OBAN_VARIANTS[1][1]], "peer-oban")
    enqueue_paced(lambda: asyncio.run(_oban_backlog(1)))
    _wait_rows("completed jobs", _oban_completed, PICKUPS, idle, timeout=30)
    stop(idle)
    result["pickup_ms"] = [row[0] * 1000 for row in _oban_sql(
        "SELECT EXTRACT(EPOCH FROM attempted_at - inserted_at)::float FROM oban_jobs "
        "WHERE attempted_at IS NOT NULL")]
    return result


async def _oban_enqueue_alone(count: int) -> dict:
    """Install Oban's schema, then time ``count`` enqueues one by one, as a web request
    makes them (a client-mode instance: no queues)."""
    from oban import Oban
    from oban.schema import install

    from bench.peers.oban_app import Noop, dsn

    pool = await Oban.create_pool(dsn())
    try:
        await install(pool)
        async with Oban(pool=pool):
            started = time.perf_counter()
            for _ in range(count):
                await Noop.enqueue(PAYLOAD)
            return {"enqueue": count / (time.perf_counter() - started)}
    finally:
        await pool.close()


async def _oban_backlog(count: int) -> None:
    from oban import Oban

    from bench.peers.oban_app import Noop, dsn

    pool = await Oban.create_pool(dsn())
    try:
        async with Oban(pool=pool) as client:
            for start in range(0, count, 1000):
                await client.enqueue_many([Noop.new(PAYLOAD)
                                           for _ in range(min(1000, count - start))])
    finally:
        await pool.close()


def _oban_sql(sql: str) -> list[tuple]:
    from bench.peers.oban_app import dsn

    return _postgresql_rows(dsn(), sql)


def _oban_completed() -> int:
    return _oban_sql("SELECT count(*) FROM oban_jobs WHERE state = 'completed'")[0][0]


# PgQueuer (PostgreSQL)

#: PgQueuer's worker (``bench.peers.pgqueuer_app``, one process, asyncpg) at its CLI's
#: defaults (a batch of 10, one connection), and at its performance guide's advice for
#: short jobs: a larger batch (100 drained fastest of 10, 50, 100 and 250 here), and
#: that with a pool of connections.
PGQUEUER_VARIANTS = (("defaults", ()), ("tuned", ("--batch-size", "100")),
                     ("tuned_pool", ("--batch-size", "100", "--pool")))


def pgqueuer(messages: int, url: str) -> dict:
    """PgQueuer's worker at each of PGQUEUER_VARIANTS, draining until the queue is
    empty (its ``drain`` mode); rates and pickup from its log table, which holds a row
    for each job's queueing, pick and success."""
    import asyncio

    fresh_database(url)
    os.environ["DATABASE_URL"] = url
    from bench.peers import postgresql_url

    subprocess.run([sys.executable, "-m", "pgqueuer", "--pg-dsn", postgresql_url(),
                    "install"], check=True, capture_output=True)
    command = [sys.executable, "-m", "bench.peers.pgqueuer_app"]
    result: dict = {"enqueue": asyncio.run(_pgqueuer_enqueue(min(messages, 2000), 1))}
    for name, options in PGQUEUER_VARIANTS:
        _pgqueuer_sql("TRUNCATE pgqueuer, pgqueuer_log")
        asyncio.run(_pgqueuer_enqueue(messages, 1000))
        # Its claim's plan needs the table's statistics: on this server (autovacuum
        # off) 50,000 jobs drained at 5,164/s without and 8,588/s with (100 a batch),
        # and at 8,628 and 10,776/s with autovacuum on. ANALYZE is what autovacuum
        # would run after so many inserts.
        _pgqueuer_sql("ANALYZE pgqueuer")
        worker = spawn([*command, "--drain", *options], "peer-pgqueuer")
        if worker.wait(900) != 0:
            raise RuntimeError("PgQueuer's worker failed (bench/results/peer-pgqueuer.log)")
        count, first, last = _pgqueuer_sql(
            "SELECT count(*) FILTER (WHERE status = 'successful'), "
            "min(created) FILTER (WHERE status = 'picked'), "
            "max(created) FILTER (WHERE status = 'successful') FROM pgqueuer_log")[0]
        if count != messages:
            raise RuntimeError(f"PgQueuer ran {count} of {messages} jobs")
        result[f"drain_{name}"] = count / (last - first).total_seconds()
    result["drain_1"] = max(result[f"drain_{name}"] for name, _o in PGQUEUER_VARIANTS)
    _pgqueuer_sql("TRUNCATE pgqueuer, pgqueuer_log")
    idle = spawn([*command, "--log-level", "WARNING"], "peer-pgqueuer")
    enqueue_paced(lambda: asyncio.run(_pgqueuer_enqueue(1, 1)))
    _wait_rows("successful jobs", lambda: _pgqueuer_sql(
        "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")[0][0],
        PICKUPS, idle, timeout=30)
    stop(idle)
    result["pickup_ms"] = [row[0] * 1000 for row in _pgqueuer_sql(
        "SELECT EXTRACT(EPOCH FROM p.created - q.created)::float FROM pgqueuer_log q "
        "JOIN pgqueuer_log p ON p.job_id = q.job_id AND p.status = 'picked' "
        "WHERE q.status = 'queued'")]
    return result


async def _pgqueuer_enqueue(count: int, per_call: int) -> float:
    """Enqueue ``count`` jobs, ``per_call`` a call (1: as a web request makes them);
    the rate."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    from bench.peers import postgresql_url
    from bench.peers.pgqueuer_app import ENTRYPOINT

    payload = json.dumps(PAYLOAD).encode()
    connection = await asyncpg.connect(postgresql_url())
    try:
        queries = Queries(AsyncpgDriver(connection))
        started = time.perf_counter()
        for start in range(0, count, per_call):
            if per_call == 1:
                await queries.enqueue(ENTRYPOINT, payload)
            else:
                size = min(per_call, count - start)
                await queries.enqueue([ENTRYPOINT] * size, [payload] * size, [0] * size)
        return count / (time.perf_counter() - started)
    finally:
        await connection.close()


def _pgqueuer_sql(sql: str) -> list[tuple]:
    from bench.peers import postgresql_url

    return _postgresql_rows(postgresql_url(), sql)


# Huey (SQLite)

#: Huey's consumer (``huey_consumer``, one process, its default of one worker thread;
#: 2 and 4 threads drained slower here, taking turns at SQLite's one writer) with its
#: defaults (SQLite's own synchronous FULL, an fsync a commit), and with the option
#: its storage has for speed, ``fsync=False``: synchronous OFF, with which an operating
#: system crash can corrupt the file; djqueue's NORMAL (in WAL mode) can lose the last
#: commits in a power loss, and never corrupts it.
HUEY_VARIANTS = (("defaults", ""), ("fsync_off", "off"))


def huey_peer(messages: int, url: str) -> dict:
    """Huey's consumer at each of HUEY_VARIANTS draining a backlog of ``messages``, then
    idle for the pickup; rates from the task's own count (bench.peers.huey_app). Its
    SQLite file is the one ``url`` names, with ``-huey`` before its suffix."""
    import importlib

    from dj_database_url import parse

    name = Path(parse(url)["NAME"])
    db = str(name.with_name(f"{name.stem}-huey{name.suffix}"))
    tally = f"{db}.tally"
    fresh_database(f"sqlite:///{db}")
    command = [sys.executable, "-m", "huey.bin.huey_consumer", "bench.peers.huey_app.huey"]
    os.environ.update(HUEY_DB=db, HUEY_TARGET=str(messages), HUEY_TALLY=tally)
    from bench.peers import huey_app

    result: dict = {}
    for variant, fsync in HUEY_VARIANTS:
        os.environ["HUEY_FSYNC"] = fsync
        huey_app = importlib.reload(huey_app)  # its storage opened with this variant's fsync
        noop = huey_app.noop
        result[f"enqueue_{variant}"] = timed_rate(min(messages, 2000),
                                                  lambda i, noop=noop: noop(PAYLOAD))
        huey_app.huey.flush()
        for _ in range(messages):  # Huey has no enqueue of many at once
            noop(PAYLOAD)
        Path(tally).unlink(missing_ok=True)
        worker = spawn(command, "peer-huey", {"HUEY_FSYNC": fsync})
        _wait_rows("Huey tasks counted", lambda: int(Path(tally).exists()), 1, worker)
        stop(worker)
        counted = json.loads(Path(tally).read_text())
        if huey_app.huey.pending_count():
            raise RuntimeError(f"Huey left {huey_app.huey.pending_count()} tasks queued")
        result[f"drain_{variant}"] = counted["count"] / (counted["last"] - counted["first"])
    result["enqueue"] = result["enqueue_defaults"]
    result["drain_1"] = max(result[f"drain_{variant}"] for variant, _f in HUEY_VARIANTS)
    huey_app.huey.flush()
    pickups = Path(f"{tally}.pickup")
    pickups.unlink(missing_ok=True)
    # Polling at most every 0.1 s (by default its wait grows to 10 s while idle), as
    # the django.tasks peers' idle workers are given --interval 0.1.
    idle = spawn([*command, "--max-delay", "0.1"], "peer-huey", {"HUEY_FSYNC": ""})
    enqueue_paced(lambda: huey_app.noop({**PAYLOAD, "sent": time.time()}))
    _wait_rows("Huey pickups", lambda: len(pickups.read_text().split()) if pickups.exists()
               else 0, PICKUPS, idle, timeout=30)
    stop(idle)
    result["pickup_ms"] = [float(line) * 1000 for line in pickups.read_text().split()]
    return result


# Celery with the local Redis

def celery(messages: int) -> dict:
    from bench.peers import celery_app
    from bench.peers.celery_app import DONE_KEY, PICKUP_KEY, noop

    client = celery_app.client()
    client.flushdb()
    worker = [sys.executable, "-m", "celery", "-A", "bench.peers.celery_app:app", "worker",
              "--pool=solo", "--concurrency=1", "--without-heartbeat", "--without-gossip",
              "--without-mingle", "--loglevel=WARNING"]
    result: dict = {"enqueue": timed_rate(min(messages, 2000),
                                          lambda i: noop.delay(PAYLOAD))}
    client.flushdb()
    for processes in (1, 2):
        client.flushdb()
        for _ in range(messages):
            noop.delay(PAYLOAD)
        workers = [spawn([*worker, "-n", f"bench{i}@%h"], "peer-celery")
                   for i in range(processes)]
        result[f"drain_{processes}"] = _count_rate(client, DONE_KEY, messages, workers)
        for process in workers:
            stop(process)
    client.flushdb()
    idle = spawn([*worker, "-n", "idle@%h"], "peer-celery")
    enqueue_paced(lambda: noop.delay({**PAYLOAD, "sent": time.time()}))
    _count_rate(client, DONE_KEY, PICKUPS, [idle])
    stop(idle)
    result["pickup_ms"] = [float(v) * 1000 for v in client.lrange(PICKUP_KEY, 0, -1)]
    client.flushdb()
    return result


def _count_rate(client, key: str, target: int, workers: list[subprocess.Popen],
                timeout: float = 600) -> float:
    """Rate at which ``key`` counts up to ``target``, from its first increment."""
    deadline = time.monotonic() + timeout
    first = None
    while True:
        done = int(client.get(key) or 0)
        now = time.perf_counter()
        if done and first is None:
            first = (now, done)
        if done >= target:
            break
        if time.monotonic() > deadline or all(w.poll() is not None for w in workers):
            raise RuntimeError(f"only {done} of {target} tasks ran (see bench/results/"
                               "peer-celery.log)")
        time.sleep(0.005)
    return (done - first[1]) / (now - first[0]) if now > first[0] else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("peer", choices=[*DJANGO_PEERS, "procrastinate", "oban", "pgqueuer",
                                         "huey", "celery"])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--url", default="mysql://root@127.0.0.1:3306/djq_bench_peers")
    args = parser.parse_args()
    if args.peer == "celery":
        result = celery(args.messages)
    elif args.peer == "procrastinate":
        result = procrastinate(args.messages, args.url)
    elif args.peer == "oban":
        result = oban(args.messages, args.url)
    elif args.peer == "pgqueuer":
        result = pgqueuer(args.messages, args.url)
    elif args.peer == "huey":
        result = huey_peer(args.messages, args.url)
    else:
        result = django_peer(args.peer, args.messages, args.url)
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
