"""The Prometheus metrics view with 1,000,000 ready messages in 100 queues, on MariaDB.

    .venv/bin/python bench/metrics.py [--messages N] [--queues Q] [--repeats R]

Fills Q queues with N messages (90 % ready; the rest delayed, in flight, dead;
dashboard.fill) and 200,000 finished ones, registers 20 workers, gives a tenth
of the queues limits, runs the reaper's statistics passes, then scrapes
``/metrics`` R times through Django's test client (server time: view, queries
and encoding). Writes bench/results/metrics.json; exits 1 if the query count
grew with the data or (unless ``--no-time-target``) the median is over 50 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from common import BENCH_DB, add_time_target_switch, drop_database, fresh_database, results_dir, verdict
from dashboard import fill, timed

TARGET_MS = 50.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--finished", type=int, default=200_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--url", default=f"mysql://root@127.0.0.1:3306/{BENCH_DB}")
    add_time_target_switch(parser)
    args = parser.parse_args()
    admin = fresh_database(args.url)
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    import djqueue
    from djqueue.models import Worker
    from djqueue.monitoring import rollups

    queues = [djqueue.create_queue(f"bench.{i:03d}", **(
        {"concurrency_limit": 100, "rate_limit": "50/s"} if i % 10 == 0 else {}))
        for i in range(args.queues)]
    for i in range(20):
        Worker.objects.create(id=f"bench-worker-{i}", hostname="bench", pid=i, lock_key=f"k{i}",
                              queues=[q.name for q in queues[:5]])
    client = Client()

    def scrape() -> None:
        response = client.get("/metrics")
        assert response.status_code == 200, response.status_code

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            scrape()
        return len(captured)

    rollups.sample_depth()
    scrape()
    empty_queries = queries()
    print(f"filling {args.messages:,} messages in {args.queues} queues ...", flush=True)
    fill([q.pk for q in queues], args.messages, args.finished)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE TABLE djqueue_message, djqueue_history")
    rollups.roll_up()
    rollups.roll_up()
    rollups.sample_depth()
    for _ in range(3):
        scrape()  # warm the connection and prometheus_client's import
    full_queries = queries()
    ms = sorted(timed(scrape, args.repeats))
    size = len(client.get("/metrics").content)
    result = {"messages": args.messages, "queues": args.queues, "repeats": args.repeats,
              "queries_empty": empty_queries, "queries_full": full_queries, "bytes": size,
              "median_ms": statistics.median(ms), "min_ms": ms[0], "max_ms": ms[-1],
              "p95_ms": ms[max(0, round(0.95 * len(ms)) - 1)]}
    print(f"\n/metrics, {args.messages:,} messages in {args.queues} queues, {args.repeats} "
          f"scrapes (server time): median {result['median_ms']:.1f} ms, p95 "
          f"{result['p95_ms']:.1f}, max {result['max_ms']:.1f}; target {TARGET_MS:.0f} ms")
    print(f"  queries: {full_queries} (with an empty database: {empty_queries}); "
          f"{size:,} bytes")
    out = results_dir()
    (out / "metrics.json").write_text(json.dumps(result, indent=2))
    drop_database(admin)
    return verdict(full_queries == empty_queries, result["median_ms"] <= TARGET_MS,
                   args.time_target)


if __name__ == "__main__":
    sys.exit(main())
