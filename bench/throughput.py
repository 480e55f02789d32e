"""First throughput benchmark: djqueue beside a raw-SQL baseline, on MariaDB, in one run.

    .venv/bin/python bench/throughput.py [--messages N] [--url mysql://...]

The baseline uses mysqlclient directly on a table created LIKE djqueue_message
(same columns and indexes). Results print as a table of msgs/s with ratios and
are written to bench/results/throughput.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
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


def raw_baselines(url: str, queue_id: int, n: int) -> dict[str, float]:
    conn = raw_connection(url)
    cur = conn.cursor()
    cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    cur.execute("DROP TABLE IF EXISTS bench_raw")
    cur.execute("CREATE TABLE bench_raw LIKE djqueue_message")
    cur.execute("ALTER TABLE bench_raw ADD FOREIGN KEY (queue_id) REFERENCES djqueue_queue(id)")
    row = "(%s, 1, 0, NOW(6), %s, NULL, 0, '', '', NOW(6), NULL, NULL, NULL)"
    sql = ("INSERT INTO bench_raw (queue_id, state, priority, visible_at, body, headers, attempts,"
           " owner, lease_token, sent_at, claimed_at, errors, origin_queue_id) VALUES ")
    body = json.dumps({"to": "someone@example.com", "subject": "x" * 60})
    singles = min(n, 3000)
    started = time.perf_counter()
    for _ in range(singles):
        cur.execute(sql + row, (queue_id, body))
    single = rate(singles, time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(n // 1000):
        conn.begin()
        cur.execute(sql + ",".join([row] * 1000), [v for _ in range(1000) for v in (queue_id, body)])
        conn.commit()
    batch = rate(n // 1000 * 1000, time.perf_counter() - started)
    drained = 0
    started = time.perf_counter()
    while True:
        conn.begin()
        cur.execute("SELECT id FROM bench_raw WHERE queue_id = %s AND state = 1 "
                    "ORDER BY priority DESC, id LIMIT 100 FOR UPDATE SKIP LOCKED", (queue_id,))
        ids = [r[0] for r in cur.fetchall()]
        if not ids:
            conn.commit()
            break
        marks = ",".join(["%s"] * len(ids))
        cur.execute(f"UPDATE bench_raw SET state = 3 WHERE id IN ({marks})", ids)
        cur.execute(f"DELETE FROM bench_raw WHERE id IN ({marks})", ids)
        conn.commit()
        drained += len(ids)
    claim_ack = rate(drained, time.perf_counter() - started)
    cur.execute("DROP TABLE bench_raw")
    conn.close()
    return {"raw insert, 1 per commit": single, "raw insert, 1,000 per statement": batch,
            "raw claim+ack, 100 per transaction": claim_ack}


def djqueue_rates(url: str, n: int) -> dict[str, float]:
    import djqueue
    from djqueue.models import History, Message

    payload = {"to": "someone@example.com", "subject": "x" * 60}
    singles = min(n, 3000)
    started = time.perf_counter()
    for _ in range(singles):
        djqueue.send("bench", payload)
    single = rate(singles, time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(n // 1000):
        djqueue.send_batch("bench", [payload] * 1000)
    batch = rate(n // 1000 * 1000, time.perf_counter() - started)
    pending = Message.objects.count()
    started = time.perf_counter()
    while messages := djqueue.receive("bench", max_messages=100):
        djqueue.ack_many(messages)
    api = rate(pending, time.perf_counter() - started)
    djqueue.send_batch("bench", [payload] * n)
    before = History.objects.count()
    started = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "djqueue_worker", "bench", "--burst",
                    "-c", "1", "-b", "100"], cwd=ROOT, check=True,
                   env={**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"})
    worker = rate(History.objects.count() - before, time.perf_counter() - started)
    return {"send, 1 per commit": single, "send_batch, 1,000 per call": batch,
            "receive(100) + ack_many": api, "worker process draining (incl. start-up)": worker}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--url", default=f"mysql://root@127.0.0.1:3306/{BENCH_DB}")
    args = parser.parse_args()
    admin = fresh_database(args.url)
    import djqueue

    queue = djqueue.create_queue("bench")
    raw = raw_baselines(args.url, queue.pk, args.messages)
    ours = djqueue_rates(args.url, args.messages)
    pairs = [("send, 1 per commit", "raw insert, 1 per commit"),
             ("send_batch, 1,000 per call", "raw insert, 1,000 per statement"),
             ("receive(100) + ack_many", "raw claim+ack, 100 per transaction"),
             ("worker process draining (incl. start-up)", "raw claim+ack, 100 per transaction")]
    print(f"\n{'djqueue':45} {'msgs/s':>9}   {'raw SQL baseline':38} {'msgs/s':>9}  ratio")
    rows = []
    for mine, base in pairs:
        ratio = ours[mine] / raw[base]
        rows.append({"djqueue": mine, "rate": ours[mine], "baseline": base,
                     "baseline_rate": raw[base], "ratio": ratio})
        print(f"{mine:45} {ours[mine]:9.0f}   {base:38} {raw[base]:9.0f}  {ratio:5.2f}")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "throughput.json").write_text(json.dumps({"messages": args.messages, "rows": rows},
                                                    indent=2))
    drop_database(admin)


if __name__ == "__main__":
    main()
