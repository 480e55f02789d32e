"""PostgreSQL under churn: the worker's drain after 1,000,000 messages have passed
through the queue, against the same drain on a fresh table, with the server's
autovacuum off (the reaper vacuums, djqueue.maintenance.vacuuming) and on.

    .venv/bin/python bench/postgres_churn.py [--through N] [--drain N] [--repeats N]

Each condition: a fresh database with a reaper running, as in production;
``--repeats`` drains of ``--drain`` messages by one worker at its defaults;
``--through`` more messages through the queue in rounds of 100,000; then the
same drains again, each set after a CHECKPOINT. The rates compared are the medians
of each set. Prints one JSON line: the rates, their ratio, and the table's and
indexes' size at the end.
The server's autovacuum setting is restored afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
URL = os.environ.get("DJQUEUE_BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432/djq_bench")
ROUND = 100_000


def admin():
    import dj_database_url
    import psycopg

    cfg = dj_database_url.parse(URL)
    return psycopg.connect(host=cfg["HOST"], port=int(cfg["PORT"] or 5432),
                           user=cfg["USER"] or "postgres", dbname="postgres", autocommit=True)


def set_autovacuum(conn, value: str) -> None:
    conn.execute(f"ALTER SYSTEM SET autovacuum = {'on' if value == 'on' else 'off'}")
    conn.execute("SELECT pg_reload_conf()")
    for _ in range(100):  # the reload reaches the postmaster at once, new sessions soon
        if conn.execute("SHOW autovacuum").fetchone()[0] == value:
            return
        time.sleep(0.05)


def run(*args: str, background: bool = False):
    env = {**os.environ, "DATABASE_URL": URL, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    command = [sys.executable, str(ROOT / "manage.py"), *args]
    if background:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return None


def sql(query: str, *params):
    import dj_database_url
    import psycopg

    cfg = dj_database_url.parse(URL)
    with psycopg.connect(host=cfg["HOST"], port=int(cfg["PORT"] or 5432),
                         user=cfg["USER"] or "postgres", dbname=cfg["NAME"],
                         autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def fill(count: int) -> None:
    sql("INSERT INTO djqueue_message (queue_id, state, priority, visible_at, body, attempts, "
        "owner, lease_token, sent_at) SELECT q.id, 1, 0, now(), %s, 0, '', '', now() "
        "FROM djqueue_queue q, generate_series(1, %s) WHERE q.name = 'bench'",
        json.dumps({"to": "someone@example.com", "subject": "x" * 60}), count)


def drain_rate() -> float:
    count, first, last = sql("SELECT COUNT(*), MIN(claimed_at), MAX(finished_at) "
                             "FROM djqueue_history")[0]
    sql("TRUNCATE djqueue_history")
    return count / (last - first).total_seconds()


def drains(worker: tuple[str, ...], drain: int, repeats: int) -> list[float]:
    """``repeats`` drains of ``drain`` messages, one after the other; their rates.

    A ``CHECKPOINT`` comes first, so that neither set of drains pays for the WAL
    written before it: the 1,000,000 messages force checkpoints (max_wal_size),
    which otherwise land in the drains after them, and not in the fresh ones."""
    sql("CHECKPOINT")
    rates = []
    for _ in range(repeats):
        fill(drain)
        run(*worker)
        rates.append(drain_rate())
    return rates


def condition(autovacuum: str, through: int, drain: int, repeats: int) -> dict[str, float]:
    conn = admin()
    set_autovacuum(conn, autovacuum)
    name = URL.rsplit("/", 1)[1]
    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.execute(f'CREATE DATABASE "{name}"')
    run("migrate", "-v0")
    run("shell", "-c", "import djqueue; djqueue.create_queue('bench', exist_ok=True)")
    worker = ("djqueue_worker", "bench", "--burst")
    reaper = run("djqueue_reaper", background=True)
    fresh_rates = drains(worker, drain, repeats)
    try:
        for start in range(0, through, ROUND):
            fill(min(ROUND, through - start))
            run(*worker)
            sql("TRUNCATE djqueue_history")
        after_rates = drains(worker, drain, repeats)
    finally:
        reaper.terminate()
        reaper.wait(30)
    size = sql("SELECT pg_table_size('djqueue_message'), pg_indexes_size('djqueue_message'), "
               "n_dead_tup FROM pg_stat_user_tables WHERE relname = 'djqueue_message'")[0]
    fresh, after = statistics.median(fresh_rates), statistics.median(after_rates)
    return {f"pg_churn_fresh_{autovacuum}": fresh, f"pg_churn_after_{autovacuum}": after,
            f"pg_churn_ratio_{autovacuum}": after / fresh,
            f"pg_churn_fresh_runs_{autovacuum}": fresh_rates,
            f"pg_churn_after_runs_{autovacuum}": after_rates,
            f"pg_churn_table_mb_{autovacuum}": size[0] / 2**20,
            f"pg_churn_indexes_mb_{autovacuum}": size[1] / 2**20,
            f"pg_churn_dead_rows_{autovacuum}": size[2]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--through", type=int, default=1_000_000)
    parser.add_argument("--drain", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    conn = admin()
    before = conn.execute("SHOW autovacuum").fetchone()[0]
    results: dict[str, float] = {}
    try:
        for value in ("off", "on"):
            results.update(condition(value, args.through, args.drain, args.repeats))
    finally:
        set_autovacuum(conn, before)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
