"""The measurements of ``make bench`` (see suite.py). Each returns {name: value}.

Rates are messages per second. Worker drain rates come from the history rows'
timestamps (first claim to last finish), so process start-up is not counted;
CPU per message is the worker processes' user+system time over the messages.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from common import (
    BENCH_DB,
    PARTITIONS,
    ROOT,
    pickup_latencies,
    quiet_round_trips,
    raw_connection,
    settle,
    wait_for_worker,
)

PAYLOAD = {"to": "someone@example.com", "subject": "x" * 60}
BODY = json.dumps(PAYLOAD, separators=(",", ":"))
WORKER = [sys.executable, str(ROOT / "manage.py"), "djqueue_worker"]


def env() -> dict[str, str]:
    """The workers' environment: the bench settings and DATABASE_URL set by setup_django."""
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}

__all__ = [
    "BENCH_DB",
    "api",
    "backlog",
    "django_task_cost",
    "inserts",
    "limited_worker",
    "memory",
    "partitioned",
    "pickup",
    "raw",
    "receive_pickup",
    "tasks",
    "traced_worker",
    "worker",
]


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def queue_id(name: str = "bench") -> int:
    import djqueue

    return djqueue.create_queue(name, exist_ok=True).pk


def clear(alias: str = "default") -> None:
    """Empty the message and history tables (TRUNCATE: a million rows in no time)."""
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
        for table in ("djqueue_message", "djqueue_history", "djqueue_taskrecord"):
            cursor.execute(f"TRUNCATE TABLE {table}")
        cursor.execute("SET FOREIGN_KEY_CHECKS = 1")


RAW_COLUMNS = ("queue_id, state, priority, visible_at, body, headers, attempts, owner, lease_token,"
               " sent_at, claimed_at, errors, origin_queue_id")
RAW_ROW = "(%s, 1, 0, NOW(6), %s, NULL, 0, '', '', NOW(6), NULL, NULL, NULL)"
#: Rounds of the insert comparisons: raw and djqueue take turns, so a slow spell of the
#: machine (runs of the same loop differ by 10-20 % here) falls on both of them.
INSERT_ROUNDS = 5


def inserts(url: str, n: int) -> dict[str, float]:
    """Inserts, raw (mysqlclient into bench_raw, a table LIKE djqueue_message) against
    djqueue (send, send_batch), in alternating rounds; the rows stay for the claim loops."""
    import djqueue

    clear()
    conn = raw_connection(url)
    cur = conn.cursor()
    cur.execute("DROP TABLE IF EXISTS bench_raw")
    cur.execute("CREATE TABLE bench_raw LIKE djqueue_message")
    qid = queue_id()
    sql = f"INSERT INTO bench_raw ({RAW_COLUMNS}) VALUES "
    batch_sql = sql + ",".join([RAW_ROW] * 1000)
    batch_params = [v for _ in range(1000) for v in (qid, BODY)]

    def raw_single() -> None:
        cur.execute(sql + RAW_ROW, (qid, BODY))

    def raw_batch() -> None:
        conn.begin()
        cur.execute(batch_sql, batch_params)
        conn.commit()

    loops = {
        "raw_insert_1": (raw_single, 1), "send_1": (lambda: djqueue.send("bench", PAYLOAD), 1),
        "raw_insert_1000": (raw_batch, 1000),
        "send_batch_1000": (lambda: djqueue.send_batch("bench", [PAYLOAD] * 1000), 1000),
    }
    calls = {1: max(1, min(n, 3000) // INSERT_ROUNDS),
             1000: max(1, n // 1000 // INSERT_ROUNDS)}
    seconds = dict.fromkeys(loops, 0.0)
    for _ in range(INSERT_ROUNDS):
        for key, (call, _size) in loops.items():
            started = time.perf_counter()
            for _ in range(calls[_size]):
                call()
            seconds[key] += time.perf_counter() - started
    conn.close()
    return {key: rate(calls[size] * size * INSERT_ROUNDS, seconds[key])
            for key, (_call, size) in loops.items()}


def raw(url: str) -> dict[str, float]:
    """The raw-SQL claim+ack limit: mysqlclient loops draining bench_raw (see inserts)."""
    conn = raw_connection(url)
    cur = conn.cursor()
    cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    qid = queue_id()
    results = {}
    for per_txn, key in ((1, "raw_claim_ack_1"), (100, "raw_claim_ack_100")):
        limit = 2000 if per_txn == 1 else None
        drained = 0
        started = time.perf_counter()
        while limit is None or drained < limit:
            conn.begin()
            cur.execute("SELECT id FROM bench_raw WHERE queue_id = %s AND state = 1 "
                        "ORDER BY priority DESC, id LIMIT %s FOR UPDATE SKIP LOCKED",
                        (qid, per_txn))
            ids = [r[0] for r in cur.fetchall()]
            if not ids:
                conn.commit()
                break
            marks = ",".join(["%s"] * len(ids))
            cur.execute(f"UPDATE bench_raw SET state = 3 WHERE id IN ({marks})", ids)
            cur.execute(f"DELETE FROM bench_raw WHERE id IN ({marks})", ids)
            conn.commit()
            drained += len(ids)
        results[key] = rate(drained, time.perf_counter() - started)
    cur.execute("DROP TABLE bench_raw")
    conn.close()
    return results


def api() -> dict[str, float]:
    """djqueue's receive(100) + ack_many in this process, draining what inserts() sent."""
    import djqueue

    drained = 0
    started = time.perf_counter()
    while messages := djqueue.receive("bench", max_messages=100):
        drained += len(djqueue.ack_many(messages))
    return {"api_batch_100": rate(drained, time.perf_counter() - started)}


def fill(count: int, name: str = "bench", alias: str = "default") -> None:
    """``count`` ready messages in one statement (MariaDB's sequence engine)."""
    from django.db import connections

    qid = queue_id(name) if alias == "default" else partition_queue_id(name, alias)
    with connections[alias].cursor() as cursor:
        for start in range(0, count, 1_000_000):
            size = min(1_000_000, count - start)
            cursor.execute(
                "INSERT INTO djqueue_message (queue_id, state, priority, visible_at, body, "
                "attempts, owner, lease_token, sent_at) "
                f"SELECT %s, 1, 0, NOW(6), %s, 0, '', '', NOW(6) FROM seq_1_to_{size}",
                [qid, BODY])


def drain_rate(since_id: int = 0, aliases: tuple[str, ...] = ("default",)) -> tuple[float, int]:
    """Messages per second from the first claim to the last finish, over ``aliases``."""
    from django.db import connections

    total, firsts, lasts = 0, [], []
    for alias in aliases:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT COUNT(*), MIN(claimed_at), MAX(finished_at) FROM "
                           "djqueue_history WHERE id > %s AND worker <> 'history'", [since_id])
            count, first, last = cursor.fetchone()
        if count:
            total += count
            firsts.append(first)
            lasts.append(last)
    return (rate(total, (max(lasts) - min(firsts)).total_seconds()) if total else 0.0), total


def partition_queue_id(name: str, alias: str) -> int:
    import djqueue
    from djqueue.models import Queue

    djqueue.create_queue(name, exist_ok=True)
    return Queue.objects.using(alias).get(name=name).pk


def partitioned(n: int) -> dict[str, float]:
    """One worker process (``-b 100``) draining ``n`` messages of a queue partitioned over
    three databases of this server, against the same on a plain queue, in turns (three
    rounds): what spreading a queue costs a worker. On one server it cannot show the
    gain of several (docs/scaling.md)."""
    import statistics

    plain, spread = [], []
    for _ in range(3):
        clear()
        fill(n)
        run_workers("bench", 1)
        plain.append(drain_rate()[0])
        for alias in PARTITIONS:
            clear(alias)
            fill(n // len(PARTITIONS), "bench.parted", alias)
        run_workers("bench.parted", 1)
        spread.append(drain_rate(aliases=PARTITIONS)[0])
    return {"partitioned_1": statistics.median(plain),
            "partitioned_3": statistics.median(spread)}


def run_workers(queue: str, processes: int, *options: str,
                extra_env: dict[str, str] | None = None) -> float:
    """Run burst workers to completion; returns their CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    workers = [subprocess.Popen([*WORKER, queue, "--burst", "-c", "1", "-b", "100", *options],
                                cwd=ROOT, env={**env(), **(extra_env or {})})
               for _ in range(processes)]
    for process in workers:
        if process.wait() != 0:
            raise RuntimeError(f"worker exited with {process.returncode}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def worker(n: int, processes: int, key: str) -> dict[str, float]:
    clear()
    fill(n)
    cpu = run_workers("bench", processes)
    found, count = drain_rate()
    return {key: found, f"{key}_cpu_us": cpu / count * 1e6}


def limited_worker(n: int) -> dict[str, float]:
    """``worker`` on a queue with ``concurrency_limit=1000``, which the worker never reaches
    (it holds at most a couple of batches): what a limited claim costs by itself."""
    import djqueue

    clear()
    djqueue.create_queue("bench.limited", exist_ok=True)
    djqueue.set_limits("bench.limited", concurrency_limit=1000)
    fill(n, "bench.limited")
    run_workers("bench.limited", 1)
    return {"worker_limited_1": drain_rate()[0]}


def _one_worker_on(queue: str, n: int, row: str) -> dict[str, float]:
    """``n`` messages on ``queue`` (made if missing), drained by one worker at the row's
    defaults: the rate as ``row`` and the worker's CPU a message as ``row``_cpu_us."""
    import djqueue

    clear()
    djqueue.create_queue(queue, exist_ok=True)
    fill(n, queue)
    cpu = run_workers(queue, 1)
    found, count = drain_rate()
    return {row: found, f"{row}_cpu_us": cpu / count * 1e6}


def batched_worker(n: int) -> dict[str, float]:
    """``worker`` (``-b 100``, as its row) on a queue whose handler takes lists of up to 100
    messages (``@handler(batch=100)``, a no-op): what the batch path costs itself."""
    return _one_worker_on("bench.batched", n, "worker_batched_1")


def async_worker(n: int) -> dict[str, float]:
    """``worker`` on a queue whose handler is a coroutine function (a no-op): what
    running a handler with ``async_to_sync`` costs, on the loop a handler thread keeps."""
    return _one_worker_on("bench.async", n, "worker_async_1")


def traced_worker(n: int) -> dict[str, float]:
    """``worker`` with OpenTelemetry on: the worker process has an SDK tracer provider
    (a batch span processor, spans discarded), so each handler run records a
    consumer span continuing the trace in the message's headers."""
    clear()
    fill(n)
    cpu = run_workers("bench", 1, extra_env={"DJQUEUE_BENCH_TRACING": "1"})
    found, count = drain_rate()
    return {"worker_traced_1": found, "worker_traced_1_cpu_us": cpu / count * 1e6}


def tasks(n: int) -> dict[str, float]:
    """The same through django.tasks: ``task.enqueue`` one per commit, then a worker; then
    twice as many tasks for ``djqueue_worker --processes 2`` (the two-worker rate)."""
    from bench.tasks import noop

    clear()
    count = min(n, 10_000)
    timed = min(count, 3000)
    started = time.perf_counter()
    for _ in range(timed):
        noop.enqueue(PAYLOAD)
    enqueue = rate(timed, time.perf_counter() - started)
    for _ in range(count - timed):
        noop.enqueue(PAYLOAD)
    cpu = run_workers("default", 1)
    found, drained = drain_rate()
    clear()
    for _ in range(2 * count):
        noop.enqueue(PAYLOAD)
    run_workers("default", 1, "--processes", "2")
    return {"tasks_enqueue_1": enqueue, "tasks_worker_1": found,
            "tasks_worker_1_cpu_us": cpu / drained * 1e6, "tasks_worker_2": drain_rate()[0]}


def chord(n: int) -> dict[str, float]:
    """A chord of ``n`` ``add(i, i)`` steps and a callback summing their results, from the
    start of its enqueue to the end of the callback, with one worker process (the
    default ``-c 1 -b 100``) already running, as in production: members per second,
    against ``tasks_worker_1``."""
    import djqueue
    from bench.tasks import add, total
    from djqueue.models import Worker

    clear()
    before = set(Worker.objects.values_list("pk", flat=True))
    worker = subprocess.Popen([*WORKER, "default", "-c", "1", "-b", "100"], cwd=ROOT,
                              env=env())
    try:
        while not Worker.objects.exclude(pk__in=before).exists():  # registered: it polls
            time.sleep(0.01)
        started = time.perf_counter()
        handle = djqueue.chord([djqueue.step(add, i, i) for i in range(n)],
                               djqueue.step(total)).enqueue()
        enqueued = time.perf_counter() - started
        while not handle.refresh().is_finished:  # a poll of one row, every 5 ms
            time.sleep(0.005)
        took = time.perf_counter() - started
    finally:
        worker.terminate()
        worker.wait(60)
    if handle.result != n * (n - 1):
        raise RuntimeError(f"the chord's callback returned {handle.result!r}")
    steps = handle.steps
    ran = (steps[-1].finished_at - min(s.started_at for s in steps[:-1])).total_seconds()
    return {"chord_10k": rate(n, took), "chord_enqueue": rate(n + 1, enqueued),
            "chord_run_10k": rate(n, ran)}


def django_task_cost(calls: int = 20_000,
                     empty: Callable[[], None] = clear) -> dict[str, float]:
    """What django.tasks itself asks per task, in µs, run hot in this process.

    ``tasks_django_us``: everything the framework asks when its run records are
    written: the two TaskResults, the task_started and task_finished signals (whose
    default receivers make an INFO log record each), the call and normalize_json of
    the return value.

    ``tasks_django_worker_us``: what a djqueue worker of this project does of that,
    with its logging configuration (djqueue.tasks.task_run_logs): where no handler
    would write the run records, it makes none, and sends the signals only if a
    receiver other than the framework's listens. Added in series to the plain
    worker's time per message, it estimates the best ratio a django.tasks worker could
    reach were djqueue's own per-task work nothing (not a strict bound: Python can
    overlap the loop thread's waits for the database).

    ``empty`` empties the tables before and after (MariaDB's ``clear`` by default).
    """
    from bench.tasks import noop
    from djqueue.models import Message
    from djqueue.tasks import task_handler, task_run_logs
    from djqueue.tasks.compat import normalize_json, task_backends, task_finished, task_started
    from djqueue.tasks.records import load_task, to_task_result

    empty()
    noop.enqueue(PAYLOAD)
    message = Message.objects.get()
    record = task_handler._record("default", message, message.payload)
    task = load_task(record)
    sender = type(task_backends[record.backend])

    def run(heard: bool) -> None:
        if heard:
            task_started.send(sender=sender, task_result=to_task_result(record, task))
        normalize_json(task.call(*record.args, **record.kwargs))
        if heard:
            task_finished.send(sender=sender, task_result=to_task_result(record, task))

    def best_of_three(heard: bool) -> float:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            for _ in range(calls):
                run(heard)
            best = min(best, (time.perf_counter() - started) / calls * 1e6)
        return best

    everything = best_of_three(True)
    task_run_logs.follow()  # as djqueue_worker does
    try:
        in_worker = best_of_three(not task_run_logs.runs_unheard(sender))
    finally:
        task_run_logs.stop_following()
    empty()
    return {"tasks_django_us": everything, "tasks_django_worker_us": in_worker}


def global_questions() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
        return int(cursor.fetchone()[1])


def pickup(url: str, samples: int, window: float = 10.0) -> dict[str, float]:
    """An idle worker: the queries it costs per second, how soon it picks up a send, and
    the host's own round trip after the same pauses (common.quiet_round_trips)."""
    import djqueue

    clear()
    process = subprocess.Popen([*WORKER, "bench", "-c", "1", "-b", "100"], cwd=ROOT, env=env())
    try:
        wait_for_worker()
        time.sleep(2)  # settle into idle polling
        before = global_questions()
        time.sleep(window)
        idle = (global_questions() - before - 1) / window  # minus the second SHOW itself
        latencies = pickup_latencies(samples, lambda: djqueue.send("bench", PAYLOAD))
        latencies.update(quiet_round_trips(samples, raw_connection(url)))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    return {"idle_queries_per_s": idle, **latencies}


#: A consumer process: one ``consume()`` after another, each waiting up to 20 s.
CONSUME_LOOP = """
import djqueue
while True:
    with djqueue.consume("bench", wait=20):
        pass
"""


def receive_pickup(samples: int) -> dict[str, float]:
    """A process looping on ``consume("bench", wait=20)``: how soon its waiting receive
    claims a send from this process, woken by the send's datagram; then the same with
    wake-ups off (``WAKE_HOST = None``), when its polling alone finds the message."""
    import djqueue
    from djqueue.api.worker_wakeups import wake_addresses
    from djqueue.models import Worker

    results: dict[str, float] = {}
    for row, extra in (("receive", {}), ("receive_polled", {"DJQUEUE_BENCH_NO_WAKE": "1"})):
        clear()
        process = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "shell", "-c",
                                    CONSUME_LOOP], cwd=ROOT, env={**env(), **extra})
        try:
            if extra:
                time.sleep(2)  # started and waiting (no row to wait for)
            else:
                deadline = time.monotonic() + 60
                while not any("bench" in w.queues for w in
                              Worker.objects.filter(pk__startswith="receive:")):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the consumer did not register")
                    time.sleep(0.05)
            wake_addresses.forget()  # read the rows again: the consumer's is new
            found = pickup_latencies(samples, lambda: djqueue.send("bench", PAYLOAD))
        finally:
            process.send_signal(signal.SIGINT)  # its row goes at exit
            process.wait(timeout=60)
        results[f"{row}_pickup_p50_ms"] = found["pickup_p50_ms"]
        results[f"{row}_pickup_p95_ms"] = found["pickup_p95_ms"]
    return results


def backlog(big: int, n: int) -> dict[str, float]:
    """One worker's drain rate over ``n`` messages: with 10,000 ready, with ``big`` ready
    (straight after their bulk insert, then once InnoDB has caught up with it: see
    common.settle), and with 10,000 ready beside ``big`` rows of history."""
    from django.db import connection

    results = {}
    clear()
    fill(10_000)
    with connection.cursor() as cursor:
        settle(cursor)
    run_workers("bench", 1)
    results["worker_10k"] = drain_rate()[0]
    clear()
    fill(big)
    run_workers("bench", 1, "--max-messages", str(n))
    results["worker_backlog_1m_fresh"] = drain_rate()[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT MAX(id) FROM djqueue_history")
        (last,) = cursor.fetchone()
        settle(cursor)
    run_workers("bench", 1, "--max-messages", str(n))
    results["worker_backlog_1m"] = drain_rate(since_id=last)[0]
    clear()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO djqueue_history (id, queue_id, outcome, priority, attempts, size, "
            "worker, sent_at, claimed_at, finished_at) "
            f"SELECT seq + 100000000, %s, 1, 0, 1, 100, 'history', NOW(6), NOW(6), NOW(6) "
            f"FROM seq_1_to_{big}", [queue_id()])
    fill(10_000)
    with connection.cursor() as cursor:
        settle(cursor)
    run_workers("bench", 1)
    results["worker_history_1m"] = drain_rate()[0]
    clear()
    return results


def memory(count: int) -> dict[str, float]:
    """One worker's resident memory over ``count`` messages: growth from the point 10 %
    were processed to the highest value after it."""
    from django.db.models import Max, Min

    from djqueue.models import History, Message

    clear()
    fill(count)
    first = Message.objects.aggregate(first=Min("id"))["first"]
    process = subprocess.Popen([*WORKER, "bench", "--burst", "-c", "1", "-b", "100"],
                               cwd=ROOT, env=env())
    samples = []
    while process.poll() is None:
        try:
            with open(f"/proc/{process.pid}/status") as proc:
                status = proc.read()
        except FileNotFoundError:
            break
        rss = int(next(line.split()[1] for line in status.splitlines()
                       if line.startswith("VmRSS")))
        last = History.objects.aggregate(last=Max("id"))["last"]
        samples.append((last - first + 1 if last else 0, rss))
        time.sleep(1.0)
    clear()
    settled = [rss for done, rss in samples if done >= count * 0.1]
    if len(settled) < 2:
        return {}
    return {"memory_growth": max(settled) / settled[0] - 1, "memory_rss_kb": max(settled)}
