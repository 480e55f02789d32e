"""The Spark export of 1,000,000 history rows beside a single-threaded Python export.

    .venv/bin/python bench/export.py [--rows N] [--url mysql://...]

Both run in the same process against the same MariaDB table: djqueue's export
(``local[*]``, JDBC reads split on the primary key, Parquet partitioned by
queue and date) and a plain loop (mysqlclient server-side cursor -> pyarrow ->
one Parquet file). Prints both times and the ratio; writes
bench/results/export.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from common import BENCH_DB, drop_database, fresh_database, raw_connection, results_dir

COLUMNS = ["id", "queue", "outcome", "group_key", "priority", "attempts", "size", "worker",
           "sent_at", "claimed_at", "finished_at"]


def fill(url: str, rows: int, queue_ids: list[int]) -> None:
    """History rows straight from MariaDB's sequence engine: 10 queues, spread over a day."""
    conn = raw_connection(url)
    cur = conn.cursor()
    cur.execute(
        "INSERT INTO djqueue_history (id, queue_id, outcome, priority, attempts, size, worker,"
        " group_key, sent_at, claimed_at, finished_at)"
        " SELECT seq, %s + seq %% %s, 1 + (seq %% 10 = 0), 0, 1 + (seq %% 7 = 0), 100 + seq %% 50,"
        " 'bench-worker', NULL,"
        " NOW(6) - INTERVAL 1 DAY + INTERVAL (seq %% 86400) SECOND,"
        " NOW(6) - INTERVAL 1 DAY + INTERVAL (seq %% 86400) SECOND + INTERVAL 5 MICROSECOND,"
        " NOW(6) - INTERVAL 1 DAY + INTERVAL (seq %% 86400) SECOND + INTERVAL 900 MICROSECOND"
        f" FROM seq_1_to_{int(rows)}", (min(queue_ids), len(queue_ids)))
    conn.close()


def python_export(url: str, out: Path) -> int:
    import MySQLdb.cursors
    import pyarrow as pa
    import pyarrow.parquet as pq

    conn = raw_connection(url)
    cur = conn.cursor(MySQLdb.cursors.SSCursor)
    cur.execute("SELECT h.id, q.name, h.outcome, h.group_key, h.priority, h.attempts, h.size,"
                " h.worker, h.sent_at, h.claimed_at, h.finished_at FROM djqueue_history h"
                " JOIN djqueue_queue q ON q.id = h.queue_id")
    writer = None
    total = 0
    while True:
        rows = cur.fetchmany(50_000)
        if not rows:
            break
        table = pa.table({name: [r[i] for r in rows] for i, name in enumerate(COLUMNS)})
        if writer is None:
            writer = pq.ParquetWriter(out / "history.parquet", table.schema)
        writer.write_table(table)
        total += len(rows)
    if writer is not None:
        writer.close()
    conn.close()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--url", default=f"mysql://root@127.0.0.1:3306/{BENCH_DB}")
    args = parser.parse_args()
    admin = fresh_database(args.url)
    import djqueue
    from djqueue.export.job import Exporter, ExportOptions

    queues = [djqueue.create_queue(f"q{i}").pk for i in range(10)]
    fill(args.url, args.rows, queues)
    work = Path(tempfile.mkdtemp(prefix="djq-export-bench-"))
    try:
        started = time.perf_counter()
        exported = python_export(args.url, work)
        python_seconds = time.perf_counter() - started
        exporter = Exporter(ExportOptions(out=str(work / "spark"), partitions=args.partitions,
                                          settle_seconds=0), progress=print)
        spark = exporter.start_spark()
        exporter.spark = spark
        spark.sparkContext.setLogLevel("ERROR")
        started = time.perf_counter()
        result = exporter.run()
        spark_seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert exported == result.datasets["history"] == args.rows
    ratio = python_seconds / spark_seconds
    print(f"\n{'export of':40} {'rows':>9} {'seconds':>8} {'rows/s':>9}")
    print(f"{'single-threaded mysqlclient -> pyarrow':40} {exported:9} {python_seconds:8.1f}"
          f" {exported / python_seconds:9.0f}")
    print(f"{'djqueue_export (Spark local[*])':40} {args.rows:9} {spark_seconds:8.1f}"
          f" {args.rows / spark_seconds:9.0f}")
    print(f"speed-up: {ratio:.2f}x (Spark JVM start-up excluded; it took place before timing)")
    out = results_dir()
    (out / "export.json").write_text(json.dumps({
        "rows": args.rows, "python_seconds": python_seconds, "spark_seconds": spark_seconds,
        "speedup": ratio}, indent=2))
    drop_database(admin)


if __name__ == "__main__":
    main()
