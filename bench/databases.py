"""The database axis of ``make bench``: the same rows on MariaDB, MySQL, PostgreSQL and
SQLite, each against raw loops of its own driver in the same run.

    .venv/bin/python bench/databases.py [--quick | --smoke] [--repeats N] [--messages N]
                                        [--only mariadb,mysql,postgresql,sqlite]

MySQL is a server this run starts on a free loopback port with a fresh data
directory (tests/mysql_server.py; ``scripts/ensure_system.sh mysql`` installs it),
and stops at its end; the others are the machine's shared servers.

Every database gets a child process (Django is set up once a process) that runs,
``--repeats`` times back to back:

- ``send`` one per commit against a raw single-row insert (the driver alone, on
  a table like ``djqueue_message``), in alternating rounds;
- the raw claim+ack loop: per batch of 100 one transaction that copies the
  finished batch into a history table, deletes it, claims the next 100 with
  ``SELECT ... FOR UPDATE SKIP LOCKED`` (SQLite: a write transaction instead)
  and stamps them; the limit for a worker process;
- ``djqueue_worker`` at its defaults, and at ``-b 100`` and ``-b 500``, draining a
  backlog of ``--messages`` messages (100,000) with a no-op handler;
- the django.tasks worker the same way (defaults and ``-b 100``); and the two at
  their defaults in turns, 20,000 each, three times (the ratio's target);
- the worker at its defaults on an ``exactly_once`` queue (20,000 messages), where
  each handler runs in its message's own transaction with the ack;
- handlers that wait 10 ms (``time.sleep``) under ``-c 32``: the limit is 3,200/s;
- an idle worker at its defaults: the statements (MariaDB) or transactions
  (PostgreSQL) it costs a second, and how soon it picks up a send.
- ``send`` from a process that sends less often than its caches last (1.2 s
  apart), against the raw insert at the same pace, with an idle worker waiting.
- a thousand receives waiting on one HTTP API server process, and 50 messages sent
  one by one: how soon each reaches one of them (bench/long_polls.py);
- how much of a rate limit (50/s) and a concurrency limit (3 handlers of 0.2 s) three
  worker processes use (bench/limit_use.py).

``--quick`` runs each row once at small sizes (``make bench-quick``'s scale).
``--smoke`` is smaller still, every row and window at the least that still runs it
through (1,000 messages; the pickup, admin and quiet-send windows cut to a few
samples): tests/bench runs it to check the bench works end to end, and its figures
are not measurements.

Prints a table per database and the targets; writes bench/results/databases.json
and databases.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from common import peer_python, percentile, summarise, write_results  # noqa: E402
from limit_use import limit_use  # noqa: E402
from long_polls import long_poll_latencies  # noqa: E402

URLS = {
    "mariadb": "mysql://root@127.0.0.1:3306/djq_bench",
    "mysql": "mysql://root@127.0.0.1:{port}/djq_bench",  # the port of the server started
    "postgresql": "postgres://postgres@127.0.0.1:5432/djq_bench",
    "sqlite": "sqlite:////tmp/djq_bench.sqlite3",
}


DASH = "\N{EN DASH}"

# No partitioned row here (bench/suite.py has it): bench/settings.py then declares no
# partition databases, which these runs do not create (a queue's lookup visits them all).
os.environ["DJQUEUE_BENCH_NO_PARTITIONS"] = "1"


#: The peers measured on each database (bench/peers/run.py, from .venv-bench), and the
#: factor djqueue's django.tasks worker at its defaults is to reach against each (issue
#: #28, on MariaDB and PostgreSQL: TARGETED_PEERS); None: the ratio is reported, with
#: no target (Oban for Python, PgQueuer and Huey, and every peer on SQLite, measured
#: since).
PEERS = {"mariadb": ("tasks-db", "dj-queue", "django-ox"),
         "postgresql": ("tasks-db", "dj-queue", "django-ox", "procrastinate", "oban",
                        "pgqueuer"),
         "sqlite": ("tasks-db", "dj-queue", "django-ox", "huey")}
PEER_FACTORS: dict[str, float | None] = {"tasks-db": 25, "dj-queue": 10, "django-ox": 25,
                                         "procrastinate": 10, "oban": None,
                                         "pgqueuer": None, "huey": None}
TARGETED_PEERS = ("mariadb", "postgresql")
#: Peers that drain --peer-messages in well under a second drain this many times as
#: many, so that their rate is not a few batches' (PgQueuer: 5,000 in 0.3 s; Huey:
#: 5,000 in 0.6 s with fsync=False).
PEER_SCALES = {"pgqueuer": 10, "huey": 4}
PEER_URLS = {"mariadb": "mysql://root@127.0.0.1:3306/djq_bench_peers",
             "postgresql": "postgres://postgres@127.0.0.1:5432/djq_bench_peers",
             "sqlite": "sqlite:////tmp/djq_bench_peers.sqlite3"}


def run_peer(peer: str, url: str, messages: int) -> dict[str, float]:
    """One peer's drain (the best of its variants), enqueue and pickup, as measures."""
    done = subprocess.run([str(peer_python()), "-m", "bench.peers.run", peer, "--messages",
                           str(messages), "--url", url], cwd=ROOT, check=True,
                          capture_output=True, text=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    measured = {f"peer_{peer}_{key}": value for key, value in found.items()
                if key.startswith(("drain_", "enqueue"))}
    if found["pickup_ms"]:
        measured[f"peer_{peer}_pickup_p50_ms"] = percentile(found["pickup_ms"], 50)
    return measured


# The parent: one child a database, then the report.

@contextlib.contextmanager
def database_url(name: str) -> Iterator[str]:
    """The URL of ``name``'s bench database; for MySQL, of a server started for the
    child's run and stopped (its data removed) when the run ends."""
    if name != "mysql":
        yield URLS[name]
        return
    from tests.mysql_server import ROOT as MYSQL_ROOT
    from tests.mysql_server import ChrootMySQL
    from tests.servers import free_port

    if not (MYSQL_ROOT / "usr/sbin/mysqld").exists():
        subprocess.run([str(ROOT / "scripts" / "ensure_system.sh"), "mysql"], check=True)
    server = ChrootMySQL(MYSQL_ROOT, free_port())
    try:
        server.start()
        print(f"mysql: MySQL {server.version} on 127.0.0.1:{server.port}", flush=True)
        yield URLS[name].format(port=server.port)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="the least that runs every row (checks the bench; no figures)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--only", default=",".join(URLS))
    parser.add_argument("--peer-messages", type=int, default=5_000)
    parser.add_argument("--no-peers", action="store_true", help="skip the peers")
    parser.add_argument("--one", choices=list(URLS), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.quick = args.quick or args.smoke
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.messages = args.messages or (1_000 if args.smoke else 5_000 if args.quick else 100_000)
    if args.one:
        print(json.dumps(one_database(args.one, args.url or URLS[args.one], args)))
        return
    started = time.monotonic()
    found: dict[str, dict] = {}
    for name in args.only.split(","):
        print(f"{name} ...", flush=True)
        with database_url(name) as url:
            done = subprocess.run(
                [sys.executable, __file__, "--one", name, "--url", url, "--repeats",
                 str(args.repeats), "--messages", str(args.messages),
                 *(["--smoke"] if args.smoke else ["--quick"] if args.quick else [])],
                cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True)
        found[name] = json.loads(done.stdout.strip().splitlines()[-1])
        if not (args.quick or args.no_peers):
            for peer in PEERS.get(name, ()):
                print(f"{name}: {peer} ...", flush=True)
                measured = run_peer(peer, PEER_URLS[name],
                                    args.peer_messages * PEER_SCALES.get(peer, 1))
                for run in found[name]:
                    run.update(measured)
    summary = {name: summarise(runs) for name, runs in found.items()}
    targets = report(summary)
    written = write_results("databases", {
        "messages": args.messages, "repeats": args.repeats, "quick": args.quick,
        "smoke": args.smoke,
        "seconds": time.monotonic() - started, "summary": summary, "targets": targets,
        "runs": found}, markdown(summary))
    print(f"\nwritten: {written} and {written.with_suffix('.md').name} "
          f"({time.monotonic() - started:.0f} s)")


def median(summary: dict, key: str) -> float | None:
    return summary[key]["median"] if key in summary else None


def targets(summary: dict[str, dict]) -> list[tuple[str, str, float | None, str, bool | None]]:
    """(database, target, value, needed, holds) for every target the run can judge."""
    rows = []

    def ratio(db: str, name: str, mine: str, base: str | float | None,
              factor: float | None) -> None:
        """The row of ``mine`` over ``base`` (a key of the run, or a fixed rate)."""
        got = median(summary[db], mine)
        baseline = median(summary[db], base) if isinstance(base, str) else base
        if got is not None and baseline:
            judged(db, name, got / baseline, factor)

    def judged(db: str, name: str, value: float | None, factor: float | None) -> None:
        """The row of ``value`` as it is: a ratio, or a share used, measured in the run."""
        if value is None:
            return
        if factor is None:  # reported, with no target
            rows.append((db, name, value, "—", None))
        else:
            rows.append((db, name, value, f"≥ {factor:g}", value >= factor))

    for db, found in summary.items():
        best = max(filter(None, (median(found, k) for k in ("worker_b100", "worker_b500"))),
                   default=None)
        ratio(db, "worker, defaults vs best -b", "worker_defaults", best, 0.8)
        ratio(db, "django.tasks worker, defaults vs -b 100", "tasks_defaults",
              "tasks_b100", 0.8)
        judged(db, "django.tasks worker vs worker (defaults), in turns",
               median(found, "turns_ratio"), 0.55)  # a ratio already: the turns' median
        ratio(db, "  the same, the rows' medians (a minute or more apart)", "tasks_defaults",
              "worker_defaults", None)
        plain, own = median(found, "worker_defaults"), median(found, "tasks_django_worker_us")
        if plain and own:  # the ratio had djqueue added nothing to Django's part of a task
            rows.append((db, "  the same, were only Django's part of a task added in series",
                         (1e6 / plain) / (1e6 / plain + own), "—", None))
        ratio(db, "10 ms handlers, -c 32, vs 3,200/s", "io_c32", 3200.0, 0.9)
        judged(db, "rate limit 50/s, 3 workers: used", median(found, "rate_use"), 0.95)
        judged(db, "concurrency limit 3, 3 workers: used", median(found, "concurrency_use"), 0.9)
        for peer, factor in PEER_FACTORS.items():
            ratio(db, f"django.tasks worker (defaults) vs {peer}", "tasks_defaults",
                  f"peer_{peer}_drain_1", factor if db in TARGETED_PEERS else None)
        if db == "postgresql":
            ratio(db, "worker (defaults) vs raw claim+ack 100", "worker_defaults",
                  "raw_claim_ack_100", 0.5)
            ratio(db, "send vs raw insert", "send_1", "raw_insert_1", 0.8)
            ratio(db, "send vs raw insert unprepared (Django's default)", "send_1",
                  "raw_insert_1_unprepared", 0.8)
            ratio(db, "send, OPTIONS prepare_threshold, vs raw insert", "send_1_prepared",
                  "raw_insert_1", 0.8)
            ratio(db, "  the same, vs raw insert with the queue's foreign key",
                  "send_1_prepared", "raw_insert_1_queue_key", None)
            ratio(db, "raw insert with the queue's foreign key vs without",
                  "raw_insert_1_queue_key", "raw_insert_1", None)
            # PgQueuer is a plain job queue (a name and bytes a job), as djqueue's
            # messages are: its rates beside the plain worker's and send's too.
            ratio(db, "worker (defaults) vs pgqueuer", "worker_defaults",
                  "peer_pgqueuer_drain_1", None)
            ratio(db, "send vs pgqueuer's enqueue", "send_1", "peer_pgqueuer_enqueue", None)
        if db == "sqlite":  # Huey, too, is a plain task queue
            ratio(db, "worker (defaults) vs huey", "worker_defaults", "peer_huey_drain_1", None)
            ratio(db, "send vs huey's enqueue (its defaults)", "send_1", "peer_huey_enqueue",
                  None)
        for key, limit in (("pickup_p50_ms", 5.0), ("pickup_p95_ms", 20.0),
                           ("tasks_pickup_p50_ms", 5.0),
                           ("idle_per_s", 20.0), ("admin_p95_ms", 200.0),
                           ("long_poll_p95_ms", 50.0),
                           ("admin_locked_errors", 0.0), ("admin_failed", 0.0)):
            if key in found:
                value = found[key]["median"]
                rows.append((db, key, value, f"≤ {limit:g}", value <= limit))
    if "sqlite" in summary and "mariadb" in summary:
        for key, factor in (("send_1", 2.6), ("worker_defaults", 0.82), ("worker_b100", 1.05)):
            got, base = median(summary["sqlite"], key), median(summary["mariadb"], key)
            if got and base:
                rows.append(("sqlite", f"{key} vs MariaDB's", got / base, f"≥ {factor:g}",
                             got / base >= factor))
    return rows


#: How a target's row reads: met, missed, or reported with no target (None).
VERDICTS = {True: "yes", False: "NO", None: "—"}
MARKS = {True: "✓", False: "✗", None: "—"}


def report(summary: dict[str, dict]) -> list[dict]:
    for db, found in summary.items():
        print(f"\n{db}\n{'measure':28} {'median':>10} {'min':>10} {'max':>10}")
        for key, s in found.items():
            print(f"{key:28} {s['median']:10.1f} {s['min']:10.1f} {s['max']:10.1f}")
    print(f"\n{'database':11} {'target':44} {'value':>8} {'needed':>8}  holds")
    rows = []
    for db, name, value, needed, holds in targets(summary):
        print(f"{db:11} {name:44} {value:8.2f} {needed:>8}  {VERDICTS[holds]}")
        rows.append({"database": db, "target": name, "value": value, "needed": needed,
                     "holds": holds})
    return rows


LABELS = {
    "raw_insert_1": "raw insert, 1 per commit", "send_1": "send, 1 per commit",
    "raw_insert_1_unprepared": "raw insert, 1 per commit, not prepared (Django's default)",
    "raw_insert_1_queue_key": "raw insert, 1 per commit, into a copy with the queue's "
                              "foreign key",
    "send_1_prepared": "send, 1 per commit, OPTIONS `prepare_threshold: 5`",
    "raw_claim_ack_100": "raw claim+ack loop, 100 per transaction",
    "worker_defaults": "worker, default options", "worker_b100": "worker, `-b 100`",
    "worker_b500": "worker, `-b 500`", "worker_defaults_cpu_us": "worker CPU per message, µs",
    "tasks_defaults": "django.tasks worker, default options",
    "tasks_b100": "django.tasks worker, `-b 100`",
    "tasks_defaults_cpu_us": "django.tasks worker CPU per task, µs",
    "tasks_quiet_log": "django.tasks worker, default options, `django.tasks` logger at WARNING",
    "tasks_django_us": "django.tasks' own cost per task (results, signals, log records), µs",
    "tasks_django_worker_us": "the part of it a djqueue worker runs (records and signals "
                              "only where heard), µs",
    "turns_worker": "in turns: worker, default options (median of the turns)",
    "turns_tasks": "in turns: django.tasks worker, default options",
    "turns_ratio": "in turns: django.tasks / worker, median of the turns' ratios",
    "turns_ratio_min": "in turns: the lowest turn's ratio",
    "turns_ratio_max": "in turns: the highest turn's ratio",
    "exactly_once_defaults": "worker on an `exactly_once` queue, default options",
    "exactly_once_defaults_cpu_us": "the same: worker CPU per message, µs",
    "io_c32": "10 ms handlers, `-c 32` (limit 3,200)",
    "io_c32_cpu_us": "10 ms handlers: worker CPU per message, µs",
    "quiet_send_ms": "send 1.2 s after the last (its caches expired), an idle worker waiting, ms",
    "quiet_raw_insert_ms": "raw insert at the same pace, ms",
    "pickup_p50_ms": "pickup p50, ms", "pickup_p95_ms": "pickup p95, ms",
    "quiet_round_trip_p50_ms": "pickup's baseline: the driver's `SELECT 1` after the same pauses, p50, ms",
    "quiet_round_trip_p95_ms": "the same, p95, ms",
    "tasks_pickup_p50_ms": "django.tasks pickup p50, ms",
    "tasks_pickup_p95_ms": "django.tasks pickup p95, ms",
    "idle_per_s": "idle worker: statements/s (MariaDB), transactions/s (PostgreSQL)",
    "admin_p50_ms": "admin pages while 2 workers drain and 1,000 msgs/s are sent: p50, ms",
    "admin_p95_ms": "the same, p95, ms",
    "admin_locked_errors": "\"database is locked\" errors (pages and process logs)",
    "rate_use": "rate limit 50/s, 3 workers of 4 threads: the rate reached / 50",
    "concurrency_use": "concurrency limit 3, handlers of 0.2 s: the ideal time / the time taken",
    "long_poll_p50_ms": "1,000 HTTP long polls waiting: a send's delivery p50, ms",
    "long_poll_p95_ms": "the same, p95, ms",
    "long_poll_intake_s": "the server's time to take the 1,000 long polls in, s",
    **{f"peer_{peer}_{key}": f"{peer}: {label}" for peer in PEER_FACTORS
       for key, label in (("drain_defaults", "drain, its defaults, tasks/s"),
                          ("drain_tuned", "drain, its fastest documented settings, tasks/s"),
                          ("drain_tuned_pool", "drain, the same with a connection pool, "
                                               "tasks/s"),
                          ("drain_fsync_off", "drain, fsync=False, tasks/s"),
                          ("drain_1", "drain, the fastest of its settings, tasks/s"),
                          ("enqueue", "enqueue, 1 per call, tasks/s"),
                          ("enqueue_fsync_off", "enqueue, 1 per call, fsync=False, tasks/s"),
                          ("pickup_p50_ms", "pickup p50 (tuned), ms"))},
}


def markdown(summary: dict[str, dict]) -> str:
    names = list(summary)
    lines = ["| measure | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for key, label in LABELS.items():
        cells = []
        for db in names:
            s = summary[db].get(key)
            cells.append("—" if s is None else
                         f"{s['median']:,.1f} ({s['min']:,.1f}{DASH}{s['max']:,.1f})"
                         if s["median"] < 100 else
                         f"{s['median']:,.0f} ({s['min']:,.0f}{DASH}{s['max']:,.0f})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| database | target | value | needed | holds |", "|---|---|---:|---:|---|"]
    lines += [f"| {db} | {name} | {value:.2f} | {needed} | {MARKS[holds]} |"
              for db, name, value, needed, holds in targets(summary)]
    return "\n".join(lines) + "\n"


# The child: one database.

def one_database(name: str, url: str, args: argparse.Namespace) -> list[dict[str, float]]:
    from vendor_loops import TURNS, VendorBench

    # The sizes of the fixed rows: full, --quick, --smoke.
    def size(full: int, quick: int, smoke: int) -> int:
        return smoke if args.smoke else quick if args.quick else full

    bench = VendorBench(name, url)
    runs = []
    for _ in range(args.repeats):
        run: dict[str, float] = {}
        run.update(bench.inserts(min(args.messages, 3000)))
        run.update(bench.raw_claim_ack(args.messages))
        run.update(bench.workers(args.messages))
        run.update(bench.tasks(args.messages // 5 if args.quick else args.messages))
        run.update(bench.task_turns(size(20_000, 2_000, 500), turns=1 if args.smoke else TURNS))
        run.update(bench.exactly_once(size(20_000, 2_000, 500)))
        run.update(bench.io_handlers(size(10_000, 2_000, 500)))
        runs.append(run)
    samples = size(30, 10, 3)
    latency = bench.pickup(samples=samples, window=size(10, 5, 1))
    latency.update(bench.pickup(samples=samples, window=0, tasks=True))
    latency.update(bench.admin_under_load(seconds=size(15, 5, 2)))
    latency.update(bench.quiet_sends(samples=size(10, 3, 2)))
    latency.update(limit_use(rated=size(1000, 500, 100), slotted=size(60, 30, 15)))
    latency.update(long_poll_latencies(waiters=size(1000, 1000, 100), sent=size(50, 20, 5)))
    for run in runs:
        run.update(latency)
    bench.drop()
    return runs


if __name__ == "__main__":
    main()
