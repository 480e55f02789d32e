"""PostgreSQL under churn: the worker's drain after 1,000,000 messages have passed
through the queue, against the same drain on a fresh table, with the server's
autovacuum off (the reaper vacuums, djqueue.maintenance.vacuuming) and on.

    .venv/bin/python bench/postgres_churn.py [--through N] [--drain N] [--repeats N]

Each condition: two databases with a reaper running on each, as in production;
``--through`` messages through the queue of the first in rounds of 100,000; then
``--repeats`` pairs of drains of ``--drain`` messages by one worker at its
defaults, one on that table and one on the second database's freshly truncated
table, in alternating order, each after a CHECKPOINT. The rates compared are the
medians of each set (each pair's ratio is printed too). Prints one JSON line: the
rates, their ratio, and the churned table's and indexes' size at the end.
A drain is 200,000 messages: at 25,000 a second one of 50,000 lasted two
seconds, and such drains varied by half from one to the next (docs: performance).
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


def run(url: str, *args: str, background: bool = False):
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    command = [sys.executable, str(ROOT / "manage.py"), *args]
    if background:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return None


def sql(url: str, query: str, *params):
    import dj_database_url
    import psycopg

    cfg = dj_database_url.parse(url)
    with psycopg.connect(host=cfg["HOST"], port=int(cfg["PORT"] or 5432),
                         user=cfg["USER"] or "postgres", dbname=cfg["NAME"],
                         autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def fill(url: str, count: int) -> None:
    sql(url, "INSERT INTO djqueue_message (queue_id, state, priority, visible_at, body, "
        "attempts, owner, lease_token, sent_at) SELECT q.id, 1, 0, now(), %s, 0, '', '', now() "
        "FROM djqueue_queue q, generate_series(1, %s) WHERE q.name = 'bench'",
        json.dumps({"to": "someone@example.com", "subject": "x" * 60}), count)


def drain_rate(url: str) -> float:
    count, first, last = sql(url, "SELECT COUNT(*), MIN(claimed_at), MAX(finished_at) "
                             "FROM djqueue_history")[0]
    sql(url, "TRUNCATE djqueue_history")
    return count / (last - first).total_seconds()


def drain(url: str, count: int, *, fresh: bool) -> float:
    """One drain of ``count`` messages by a worker at its defaults; its rate.

    ``fresh``: on a table emptied by TRUNCATE first (a new file, empty indexes: what a
    table is before any message passed). A CHECKPOINT comes first, so that no drain
    pays for WAL written before it (the churn's 1,000,000 messages force checkpoints)."""
    if fresh:
        sql(url, "TRUNCATE djqueue_message CASCADE")
    fill(url, count)
    sql(url, "CHECKPOINT")
    run(url, *WORKER)
    return drain_rate(url)


WORKER = ("djqueue_worker", "bench", "--burst")


def condition(autovacuum: str, through: int, count: int, repeats: int) -> dict[str, float]:
    """The drains on a table 1,000,000 messages went through, interleaved with drains on
    a fresh one in a second database of the same server: this machine's speed drifts
    by a fifth within minutes, and interleaving puts both under the same drift."""
    conn = admin()
    set_autovacuum(conn, autovacuum)
    churned, fresh = URL, f"{URL}_fresh"
    reapers = []
    for url in (churned, fresh):
        name = url.rsplit("/", 1)[1]
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
        run(url, "migrate", "-v0")
        run(url, "shell", "-c", "import djqueue; djqueue.create_queue('bench', exist_ok=True)")
        reapers.append(run(url, "djqueue_reaper", background=True))
    fresh_rates, after_rates = [], []
    try:
        for start in range(0, through, ROUND):
            fill(churned, min(ROUND, through - start))
            run(churned, *WORKER)
            sql(churned, "TRUNCATE djqueue_history")
        for i in range(repeats):  # fresh first, then the churned one first, in turn
            for url in (fresh, churned) if i % 2 == 0 else (churned, fresh):
                rates = fresh_rates if url == fresh else after_rates
                rates.append(drain(url, count, fresh=url == fresh))
    finally:
        for reaper in reapers:
            reaper.terminate()
            reaper.wait(30)
    size = sql(churned, "SELECT pg_table_size('djqueue_message'), "
               "pg_indexes_size('djqueue_message'), n_dead_tup FROM pg_stat_user_tables "
               "WHERE relname = 'djqueue_message'")[0]
    fresh_median, after = statistics.median(fresh_rates), statistics.median(after_rates)
    ratios = [a / f for a, f in zip(after_rates, fresh_rates, strict=True)]
    return {f"pg_churn_fresh_{autovacuum}": fresh_median,
            f"pg_churn_after_{autovacuum}": after,
            f"pg_churn_ratio_{autovacuum}": after / fresh_median,
            f"pg_churn_pair_ratios_{autovacuum}": ratios,
            f"pg_churn_fresh_runs_{autovacuum}": fresh_rates,
            f"pg_churn_after_runs_{autovacuum}": after_rates,
            f"pg_churn_table_mb_{autovacuum}": size[0] / 2**20,
            f"pg_churn_indexes_mb_{autovacuum}": size[1] / 2**20,
            f"pg_churn_dead_rows_{autovacuum}": size[2]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--through", type=int, default=1_000_000)
    parser.add_argument("--drain", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
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
