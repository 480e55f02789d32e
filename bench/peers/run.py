"""Measure one peer; prints one JSON object. Runs in .venv-bench (see bench/suite.py).

    .venv-bench/bin/python -m bench.peers.run tasks-db|celery --messages N --url URL
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
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


def spawn(args: list[str], log: str) -> subprocess.Popen:
    """Start a peer's worker, its output in bench/results/<log>.log. The environment
    is this process's minus DJANGO_SETTINGS_MODULE unless it is the peer's own (Celery
    would otherwise load djqueue's settings, which this venv cannot import)."""
    env = dict(os.environ)
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


# django-tasks-db

def tasks_db(messages: int, url: str) -> dict:
    import MySQLdb
    from dj_database_url import parse

    cfg = parse(url)
    admin = MySQLdb.connect(host=cfg["HOST"], port=int(cfg["PORT"] or 3306), user=cfg["USER"],
                            passwd=cfg["PASSWORD"] or "")
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {cfg['NAME']}")
    admin.cursor().execute(f"CREATE DATABASE {cfg['NAME']} CHARACTER SET utf8mb4")
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="bench.peers.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django_tasks_db.models import DBTaskResult

    from bench.peers.tasks import noop

    call_command("migrate", verbosity=0)
    worker = [sys.executable, "-m", "django", "db_worker", "--no-startup-delay", "--batch"]
    result: dict = {"enqueue": timed_rate(min(messages, 2000), lambda i: noop.enqueue(PAYLOAD))}
    for processes in (1, 2):
        DBTaskResult.objects.all().delete()
        for _ in range(messages):
            noop.enqueue(PAYLOAD)
        workers = [spawn(worker, "peer-tasks-db") for _ in range(processes)]
        for process in workers:
            process.wait()
        result[f"drain_{processes}"] = _db_rate(DBTaskResult.objects.all())
    DBTaskResult.objects.all().delete()
    idle = spawn([sys.executable, "-m", "django", "db_worker", "--no-startup-delay"],
                 "peer-tasks-db")
    time.sleep(2)  # let it start and go idle: pickup is measured from an idle worker
    for _ in range(PICKUPS):
        noop.enqueue(PAYLOAD)
        time.sleep(0.25 + (time.time() % 0.1))
    deadline = time.monotonic() + 10
    while (DBTaskResult.objects.filter(finished_at__isnull=True).exists()
           and time.monotonic() < deadline):
        time.sleep(0.05)
    stop(idle)
    result["pickup_ms"] = [(r.started_at - r.enqueued_at).total_seconds() * 1000
                           for r in DBTaskResult.objects.exclude(started_at=None)]
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {cfg['NAME']}")
    return result


def _db_rate(results) -> float:
    from django.db.models import Max, Min

    span = results.aggregate(first=Min("started_at"), last=Max("finished_at"))
    count = results.exclude(finished_at=None).count()
    return count / (span["last"] - span["first"]).total_seconds()


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
    time.sleep(3)  # started and idle
    for _ in range(PICKUPS):
        noop.delay({**PAYLOAD, "sent": time.time()})
        time.sleep(0.25 + (time.time() % 0.1))
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
    parser.add_argument("peer", choices=["tasks-db", "celery"])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--url", default="mysql://root@127.0.0.1:3306/djq_bench_peers")
    args = parser.parse_args()
    result = tasks_db(args.messages, args.url) if args.peer == "tasks-db" else celery(
        args.messages)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
