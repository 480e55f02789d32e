"""The admin dashboard with 1,000,000 messages on MariaDB: server time and query count.

    .venv/bin/python bench/dashboard.py [--messages N] [--repeats R] [--url mysql://...]

Fills five queues with N messages (90 % ready, 5 % delayed, 3 % in flight,
2 % dead) and 200,000 finished ones over the last hour, runs the reaper's
statistics pass, then renders the dashboard R times through Django's test
client (server time: view, queries and template, no network). The baseline,
measured in the same run, is the one grouped count a dashboard without
snapshots would make on every view (the reaper's sampler makes it instead,
every STATS_INTERVAL). Also times the message browser on the same data: one queue's
ready messages, and the newest messages of every queue (its first page).
Writes bench/results/dashboard.json; exits 1 if the query count grew with
the data or (unless ``--no-time-target``) the median is over 300 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from common import BENCH_DB, add_time_target_switch, drop_database, fresh_database, results_dir, verdict

TARGET_MS = 300.0
QUEUES = 5


def timed(work, repeats: int) -> list[float]:
    """Milliseconds of each of ``repeats`` runs of ``work``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return times


def fill(queue_ids: list[int], messages: int, finished: int) -> None:
    """Bulk-load with MariaDB's sequence engine (bench arrangement, not djqueue's path)."""
    from django.db import connection

    pick = f"ELT(seq % {len(queue_ids)} + 1, {', '.join(str(int(q)) for q in queue_ids)})"
    with connection.cursor() as cursor:
        cursor.execute(f"""
            INSERT INTO djqueue_message (queue_id, state, priority, visible_at, body, attempts,
                owner, lease_token, sent_at, claimed_at)
            SELECT {pick},
                   CASE WHEN seq % 100 < 90 THEN 1 WHEN seq % 100 < 95 THEN 2
                        WHEN seq % 100 < 98 THEN 3 ELSE 4 END,
                   seq % 3,
                   UTC_TIMESTAMP(6) + INTERVAL (seq % 600) SECOND,
                   '{{"n": 1, "pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}',
                   IF(seq % 100 >= 95, 1, 0),
                   IF(seq % 100 BETWEEN 95 AND 97, CONCAT('bench-worker-', seq % 20), ''),
                   '', UTC_TIMESTAMP(6) - INTERVAL (seq % 3600) SECOND,
                   IF(seq % 100 BETWEEN 95 AND 97, UTC_TIMESTAMP(6), NULL)
            FROM seq_1_to_{int(messages)}""")
        cursor.execute(f"""
            INSERT INTO djqueue_history (id, queue_id, outcome, priority, attempts, size, worker,
                sent_at, claimed_at, finished_at)
            SELECT {int(messages) * 2} + seq, {pick}, 1, 0, 1, 60, 'bench-worker-1',
                   UTC_TIMESTAMP(6) - INTERVAL (seq % 3600) SECOND - INTERVAL 2 SECOND,
                   UTC_TIMESTAMP(6) - INTERVAL (seq % 3600) SECOND - INTERVAL 1 SECOND,
                   UTC_TIMESTAMP(6) - INTERVAL (seq % 3600) SECOND
            FROM seq_1_to_{int(finished)}""")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--finished", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--url", default=f"mysql://root@127.0.0.1:3306/{BENCH_DB}")
    add_time_target_switch(parser)
    args = parser.parse_args()
    admin = fresh_database(args.url)
    from django.contrib.auth.models import User
    from django.db import connection
    from django.db.models import Count
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    import djqueue
    from djqueue.models import AlarmPolicy, Message, Metric, Worker
    from djqueue.monitoring import rollups

    queues = [djqueue.create_queue(f"bench.{i}") for i in range(QUEUES)]
    for i in range(20):
        Worker.objects.create(id=f"bench-worker-{i}", hostname="bench", pid=i, lock_key=f"k{i}",
                              queues=[q.name for q in queues])
    for i in range(3):
        djqueue.create_topic(f"bench.t{i}")
        djqueue.subscribe(f"bench.t{i}", "g")
    AlarmPolicy.objects.create(name="depth", metric=Metric.DEPTH, threshold=100_000)
    User.objects.create_superuser("bench", password="x")
    client = Client()
    client.force_login(User.objects.get(username="bench"))
    url = reverse("admin:djqueue_dashboard_changelist")

    def render() -> None:
        response = client.get(url)
        assert response.status_code == 200, response.status_code

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            render()
        return len(captured)

    rollups.sample_depth()
    render()
    empty_queries = queries()
    print(f"filling {args.messages:,} messages and {args.finished:,} finished ones ...", flush=True)
    started = time.perf_counter()
    fill([q.pk for q in queues], args.messages, args.finished)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE TABLE djqueue_message, djqueue_history")
    print(f"  filled in {time.perf_counter() - started:.0f} s", flush=True)

    reaper = {
        "roll_up, first pass (notes the newest id)": timed(
            lambda: rollups.roll_up(), 1),
        "roll_up, counting a backlog of sends and an hour of history": timed(
            lambda: rollups.roll_up(), 1),
        "roll_up, steady state (nothing new)": timed(lambda: rollups.roll_up(), 3),
        "sample_depth (one grouped pass over the claim index)": timed(rollups.sample_depth, 3),
    }
    for _ in range(3):
        render()  # warm caches (theme, queue cache, connection)
    full_queries = queries()
    dashboard_ms = timed(render, args.repeats)
    naive_ms = timed(lambda: list(Message.objects.values("queue_id", "state")
                                  .annotate(n=Count("pk")).order_by()), 5)
    browser_url = (reverse("admin:djqueue_message_changelist")
                   + f"?queue__id__exact={queues[0].pk}&state__exact=1")
    browser_ms = timed(lambda: client.get(browser_url), 5)
    newest_ms = timed(lambda: client.get(reverse("admin:djqueue_message_changelist")), 5)

    def summary(ms: list[float]) -> dict[str, float]:
        ordered = sorted(ms)
        return {"median_ms": statistics.median(ms), "min_ms": ordered[0], "max_ms": ordered[-1],
                "p95_ms": ordered[max(0, round(0.95 * len(ordered)) - 1)]}

    result = {
        "messages": args.messages, "finished": args.finished, "repeats": args.repeats,
        "queries_empty": empty_queries, "queries_full": full_queries,
        "dashboard": summary(dashboard_ms),
        "baseline_grouped_count": summary(naive_ms),
        "message_browser_one_queue": summary(browser_ms),
        "message_browser_newest": summary(newest_ms),
        "reaper": {k: summary(v) for k, v in reaper.items()},
    }
    median = result["dashboard"]["median_ms"]
    base = result["baseline_grouped_count"]["median_ms"]
    print(f"\nDashboard, {args.messages:,} messages, {args.repeats} renders (server time)")
    print(f"  median {median:.1f} ms  (p95 {result['dashboard']['p95_ms']:.1f}, "
          f"max {result['dashboard']['max_ms']:.1f}); target {TARGET_MS:.0f} ms")
    print(f"  queries: {full_queries} (with an empty database: {empty_queries})")
    print(f"  baseline, one grouped COUNT over the messages: median {base:.1f} ms "
          f"-> dashboard/baseline = {median / base:.2f}")
    print(f"  message browser, one queue's ready messages: median "
          f"{result['message_browser_one_queue']['median_ms']:.1f} ms")
    print(f"  message browser, the newest messages of every queue: median "
          f"{result['message_browser_newest']['median_ms']:.1f} ms")
    print("Reaper statistics pass on the same data:")
    for label, row in result["reaper"].items():
        print(f"  {label:60} {row['median_ms']:8.1f} ms")
    out = results_dir()
    (out / "dashboard.json").write_text(json.dumps(result, indent=2))
    drop_database(admin)
    return verdict(full_queries == empty_queries, median <= TARGET_MS, args.time_target)


if __name__ == "__main__":
    sys.exit(main())
