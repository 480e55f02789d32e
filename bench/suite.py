"""``make bench``: djqueue against the raw-SQL limit and its peers, in one run, on MariaDB.

    .venv/bin/python bench/suite.py [--quick] [--repeats N] [--messages N]

Each repeat measures, on the same server and back to back: the raw-SQL loops
(mysqlclient on a table LIKE djqueue_message; the inserts take turns with
djqueue's in five rounds), djqueue's API and worker
processes, the same through django.tasks, and the peers (django-tasks-db's
worker and Celery's solo worker on the local Redis, run from .venv-bench).
Prints medians with their spread (min-max) and the target ratios; writes
bench/results/suite.json. ``--quick`` runs small sizes and skips the peers, the
partitioned queue, the traced worker and the million-message runs (under a
minute). The run sizes MariaDB's InnoDB buffer pool to at least 1 GiB and
restores it after (see common.buffer_pool).
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

import http_api  # noqa: E402
import measures  # noqa: E402
from common import (  # noqa: E402
    buffer_pool,
    fresh_database,
    peer_python,
    percentile,
    summarise,
    write_results,
)

#: (name, measured, baseline, factor): a target holds when measured >= factor x baseline.
TARGETS = [
    ("send, 1 per commit", "send_1", "raw_insert_1", 0.8),
    ("send_batch, 1,000 per call", "send_batch_1000", "raw_insert_1000", 0.6),
    ("receive(100) + ack_many", "api_batch_100", "raw_claim_ack_100", 0.8),
    ("worker, 1 process", "worker_1", "raw_claim_ack_100", 0.6),
    ("worker, concurrency_limit=1000", "worker_limited_1", "worker_1", 0.9),
    ("worker, batch handler of 100", "worker_batched_1", "worker_1", 0.9),
    ("worker vs django-tasks-db", "worker_1", "tasks_db_drain_1", 25),
    ("worker vs Celery solo", "worker_1", "celery_drain_1", 10),
    ("django.tasks enqueue vs send", "tasks_enqueue_1", "send_1", 0.7),
    ("django.tasks worker vs worker", "tasks_worker_1", "worker_1", 0.7),
    ("django.tasks, two processes", "tasks_worker_2", "worker_2", 0.7),
    ("chord of 10,000, enqueue to callback", "chord_10k", "tasks_worker_1", 0.5),
    ("3 partitions vs 1 (one server)", "partitioned_3", "partitioned_1", 0.8),
    ("1M ready vs 10k ready", "worker_backlog_1m", "worker_10k", 0.9),
    ("beside 1M history vs none", "worker_history_1m", "worker_10k", 0.9),
]


def run_peer(peer: str, messages: int) -> dict:
    done = subprocess.run([str(peer_python()), "-m", "bench.peers.run", peer, "--messages",
                           str(messages)], cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_repeat(args: argparse.Namespace, url: str) -> dict[str, float]:
    n, quick = args.messages, args.quick
    steps = [
        ("inserts", lambda: measures.inserts(url, n)), ("raw", lambda: measures.raw(url)),
        ("api", measures.api),
        ("worker_1", lambda: measures.worker(n, processes=1, key="worker_1")),
        ("worker_2", lambda: measures.worker(n * 2, processes=2, key="worker_2")),
        ("limited", lambda: measures.limited_worker(n)),
        ("batched", lambda: measures.batched_worker(n)),
        ("async", lambda: measures.async_worker(n)),
        # an information row, not a target
        ("traced", None if quick else lambda: measures.traced_worker(n)),
        ("tasks", lambda: measures.tasks(n // 4 if quick else n)),
        ("chord", lambda: measures.chord(min(n, 10_000))),
        # three more databases to migrate: most of a quick run's time
        ("partitioned", None if quick else lambda: measures.partitioned(n)),
        ("django_task_cost", lambda: measures.django_task_cost(5_000 if quick else 20_000)),
        ("http_api", lambda: http_api.http_api(*((500, 3000) if quick else ())))]
    results: dict[str, float] = {}
    took = []
    for name, measure_step in steps:
        if measure_step is not None:
            started = time.monotonic()
            results.update(measure_step())
            took.append(f"{name} {time.monotonic() - started:.1f}")
    print("  seconds: " + ", ".join(took), flush=True)
    if not args.quick:
        for peer, prefix in (("tasks-db", "tasks_db"), ("celery", "celery")):
            found = run_peer(peer, max(2000, n // 10) if peer == "tasks-db" else n // 2)
            results.update({f"{prefix}_enqueue": found["enqueue"],
                            f"{prefix}_drain_1": found["drain_1"],
                            **({f"{prefix}_drain_2": found["drain_2"]}
                               if "drain_2" in found else {}),
                            f"{prefix}_pickup_p50_ms": percentile(found["pickup_ms"], 50),
                            f"{prefix}_pickup_p95_ms": percentile(found["pickup_ms"], 95)})
    return results


def report(summary: dict[str, dict[str, float]]) -> list[dict]:
    print(f"\n{'measure':34} {'median':>11} {'min':>11} {'max':>11}")
    for key, s in summary.items():
        print(f"{key:34} {s['median']:11.1f} {s['min']:11.1f} {s['max']:11.1f}")
    print(f"\n{'target':34} {'ratio':>8} {'needed':>8}  holds")
    rows = []
    for name, mine, base, factor in TARGETS:
        if mine not in summary or base not in summary:
            continue
        ratio = summary[mine]["median"] / summary[base]["median"]
        rows.append({"target": name, "ratio": ratio, "needed": factor, "holds": ratio >= factor})
        print(f"{name:34} {ratio:8.2f} {factor:8.2f}  {'yes' if ratio >= factor else 'NO'}")
    if "worker_1" in summary and "tasks_django_worker_us" in summary:
        per_message = 1e6 / summary["worker_1"]["median"]
        bound = per_message / (per_message + summary["tasks_django_worker_us"]["median"])
        rows.append({"target": "django.tasks worker vs worker, serial estimate",
                     "value": bound})
        print(f"{'  with only Django part added':34} {bound:8.2f}  (the worker's "
              f"{per_message:.0f} µs a message + Django's "
              f"{summary['tasks_django_worker_us']['median']:.0f}, in series)")
    for key, limit in (("pickup_p50_ms", 5), ("pickup_p95_ms", 20), ("idle_queries_per_s", 20)):
        if key in summary:
            value = summary[key]["median"]
            rows.append({"target": key, "value": value, "limit": limit, "holds": value <= limit})
            print(f"{key:34} {value:8.2f} {limit:8.2f}  {'yes' if value <= limit else 'NO'}")
    if "worker_2" in summary:
        value = summary["worker_2"]["median"]
        rows.append({"target": "two workers >= 9,375/s", "value": value, "holds": value >= 9375})
        print(f"{'two workers (msgs/s)':34} {value:8.0f} {9375:8.0f}  "
              f"{'yes' if value >= 9375 else 'NO'}")
    if "memory_growth" in summary:
        value = summary["memory_growth"]["median"]
        rows.append({"target": "worker memory growth", "value": value, "holds": value <= 0.10})
        print(f"{'worker memory growth':34} {value:8.1%} {0.10:8.0%}  "
              f"{'yes' if value <= 0.10 else 'NO'}")
    return rows


#: Names in the Markdown table (bench/results/suite.md, pasted into the README).
LABELS = {
    "send_1": "send, 1 per commit", "raw_insert_1": "raw insert, 1 per commit",
    "send_batch_1000": "send_batch, 1,000 per call",
    "raw_insert_1000": "raw insert, 1,000 per statement",
    "api_batch_100": "receive(100) + ack_many",
    "raw_claim_ack_100": "raw claim+ack, 100 per transaction",
    "worker_1": "worker, 1 process (no-op handler)",
    "tasks_db_drain_1": "django-tasks-db db_worker, 1 process",
    "celery_drain_1": "Celery solo worker + Redis",
    "tasks_enqueue_1": "django.tasks enqueue (djqueue backend)",
    "tasks_worker_1": "django.tasks worker (djqueue backend)",
    "tasks_worker_2": "django.tasks, `djqueue_worker -p 2`",
    "worker_2": "two worker processes (no-op handler)",
    "chord_10k": "workflow: chord of 10,000 add() and a sum, enqueue to callback, members/s",
    "worker_limited_1": "worker, queue with concurrency_limit=1000 (never reached)",
    "worker_batched_1": "worker, a batch handler of 100 (no-op)",
    "worker_async_1": "worker, an async handler (a no-op coroutine)",
    "worker_backlog_1m": "worker with 1M ready", "worker_10k": "worker with 10k ready",
    "worker_history_1m": "worker beside 1M history rows",
    "partitioned_3": "worker, a queue partitioned over 3 databases of one server",
    "partitioned_1": "worker, the same messages on a plain queue",
}
MEASURES = [
    ("worker_2", "two worker processes, msgs/s", "≥ 9,375"),
    ("pickup_p50_ms", "pickup latency p50, ms", "≤ 5"),
    ("pickup_p95_ms", "pickup latency p95, ms", "≤ 20"),
    ("receive_pickup_p50_ms", "a consume(wait=20) loop in another process: pickup p50, ms",
     "—"),
    ("receive_pickup_p95_ms", "the same, p95, ms", "—"),
    ("receive_polled_pickup_p50_ms", "the same with WAKE_HOST = None (polling alone), p50, ms",
     "—"),
    ("receive_polled_pickup_p95_ms", "the same with WAKE_HOST = None, p95, ms", "—"),
    ("quiet_round_trip_p50_ms", "pickup's baseline: MySQLdb's `SELECT 1` after the same "
     "pauses, p50, ms", "—"),
    ("idle_queries_per_s", "idle worker, queries/s", "≤ 20"),
    ("memory_growth", "worker RSS growth over 1M messages", "≤ 10 %"),
    ("worker_backlog_1m_fresh", "worker with 1M ready, straight after their bulk insert", "—"),
    ("worker_1_cpu_us", "worker CPU per message, µs", "—"),
    ("worker_traced_1", "worker with OpenTelemetry on (SDK, spans discarded), msgs/s", "—"),
    ("worker_traced_1_cpu_us", "worker CPU per message with OpenTelemetry on, µs", "—"),
    ("tasks_worker_1_cpu_us", "django.tasks worker CPU per task, µs", "—"),
    ("chord_enqueue", "workflow: a 10,000-member chord's enqueue, steps/s", "—"),
    ("chord_run_10k", "workflow: the same chord from its first member's start to the end of "
     "its callback, members/s", "—"),
    ("tasks_django_us", "django.tasks' own cost per task (results, signals, log records), µs",
     "—"),
    ("tasks_django_worker_us", "the part of it a djqueue worker runs (records and signals only "
     "where heard), µs", "—"),
    ("tasks_db_drain_2", "django-tasks-db, two processes, msgs/s", "—"),
    ("celery_drain_2", "Celery, two solo workers, msgs/s", "—"),
    ("tasks_db_pickup_p50_ms", "django-tasks-db pickup p50, ms", "—"),
    ("celery_pickup_p50_ms", "Celery pickup p50, ms", "—"),
    ("tasks_db_enqueue", "django-tasks-db enqueue, 1 per call", "—"),
    ("celery_enqueue", "Celery enqueue (delay), 1 per call", "—"),
    ("raw_claim_ack_1", "raw claim+ack, 1 per transaction", "—"),
    ("http_send_1", "HTTP API: send, 1 per request (keep-alive client), msgs/s", "—"),
    ("http_send_1_vs_api", "HTTP send 1 per request vs djqueue.send in the same run", "—"),
    ("http_send_1_server_cpu_us", "HTTP send: the server's CPU per request, µs", "—"),
    ("http_send_1_client_cpu_us", "HTTP send: the client's CPU per request (httpx), µs", "—"),
    ("http_batch_100", "HTTP API: receive 100 + ack by receipt, msgs/s", "—"),
    ("http_batch_100_vs_api", "HTTP receive+ack 100 vs receive(100)+ack_many, same run", "—"),
    ("http_batch_100_server_cpu_us", "HTTP receive+ack: the server's CPU per message, µs", "—"),
]


DASH = "\N{EN DASH}"


def markdown(summary: dict[str, dict[str, float]]) -> str:
    def cell(key: str) -> str:
        s = summary[key]
        fmt = "{:.1%}" if key == "memory_growth" else "{:,.1f}" if s["median"] < 100 else "{:,.0f}"
        return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}{DASH}{fmt.format(s['max'])})"

    lines = [f"| djqueue | msgs/s median (min{DASH}max) | baseline, same run | msgs/s | ratio | target |",
             "|---|---:|---|---:|---:|---:|"]
    for _name, mine, base, factor in TARGETS:
        if mine in summary and base in summary:
            ratio = summary[mine]["median"] / summary[base]["median"]
            lines.append(f"| {LABELS[mine]} | {cell(mine)} | {LABELS[base]} | {cell(base)} | "
                         f"**{ratio:.2f}** | ≥ {factor:g} {'✓' if ratio >= factor else '✗'} |")
    lines += ["", f"| measure | median (min{DASH}max) | target |", "|---|---:|---:|"]
    lines += [f"| {label} | {cell(key)} | {target} |" for key, label, target in MEASURES
              if key in summary]
    return "\n".join(lines) + "\n"


def measure(args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """Every measurement: the repeats, then the backlog runs (none with --quick)."""
    repeats = []
    for i in range(args.repeats):
        print(f"repeat {i + 1}/{args.repeats} ...", flush=True)
        repeats.append(one_repeat(args, args.url))
    latency = measures.pickup(args.url, samples=10 if args.quick else 30, window=3 if args.quick else 10)
    extra = [latency, measures.receive_pickup(samples=10 if args.quick else 30)]
    backlog_runs: list[dict[str, float]] = []
    if not args.quick:
        # At least five times: one drain lasts a second or two, and a single pair of runs
        # was off by 20 % either way from one pair to the next (2026-11-25).
        count = max(5, args.repeats)
        for i in range(count):
            print(f"backlog runs {i + 1}/{count} ...", flush=True)
            backlog_runs.append(measures.backlog(1_000_000, args.messages))
        extra.append(measures.memory(1_000_000))
    for found in extra:
        for r in repeats:
            r.update(found)
    return repeats, backlog_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--url", default=f"mysql://root@127.0.0.1:3306/{measures.BENCH_DB}")
    args = parser.parse_args()
    args.repeats = args.repeats or (2 if args.quick else 3)
    args.messages = args.messages or (2_000 if args.quick else 20_000)
    if args.quick:  # no partitioned row: bench/settings.py then declares no partitions
        os.environ["DJQUEUE_BENCH_NO_PARTITIONS"] = "1"
    admin = fresh_database(args.url, partitions=not args.quick)
    started = time.monotonic()
    with buffer_pool(admin) as pool:
        print(f"InnoDB buffer pool: {pool / 2**20:.0f} MiB", flush=True)
        repeats, backlog_runs = measure(args)
    summary = summarise(repeats)
    summary.update(summarise(backlog_runs))
    rows = report(summary)
    written = write_results("suite", {
        "messages": args.messages, "repeats": args.repeats, "quick": args.quick,
        "buffer_pool_bytes": pool, "seconds": time.monotonic() - started,
        "summary": summary, "targets": rows,
        "runs": repeats, "backlog_runs": backlog_runs}, markdown(summary))
    print(f"\nwritten: {written} and {written.with_suffix('.md').name} "
          f"({time.monotonic() - started:.0f} s)")
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {measures.BENCH_DB}")


if __name__ == "__main__":
    main()
