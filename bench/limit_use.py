"""The limits' rows of bench/databases.py: how much of a queue's rate and concurrency
limit three worker processes use (issue #23 asked that they be used to the full).

Three ``djqueue_worker -c 4`` processes drain, on the bench database:

- ``rate_use``: a queue with ``rate_limit="50/s"``; the rate reached from the first
  claim to the last finish, over 50. A first burst of 5 lets it reach n / (n - 5).
- ``concurrency_use``: a queue with ``concurrency_limit=3`` and handlers of 0.2 s;
  the ideal time (n times 0.2 s, over 3) over the time taken. Each hand-over of a
  place (an ack, then another claim) costs a little of it.

That the limits hold (never more than 50 + the burst in any second, never more than
3 at once) is the test suite's to check, on every database
(tests/limits/test_limit_workers.py); how fully they are used is a speed, read
here against the limit itself, and not by a test, where the host's load reads in.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from vendor_db import ROOT, WORKER

RATE, PLACES, WORK = 50, 3, 0.2


def _drain(queue: str, count: int, timeout: float) -> float:
    """Three worker processes drain ``queue``'s ``count`` messages: seconds from the
    first claim to the last finish."""
    from django.db.models import Max, Min

    from djqueue.models import History, Worker

    workers = [subprocess.Popen([*WORKER, queue, "-c", "4"], cwd=ROOT, env={**os.environ})
               for _ in range(3)]
    try:
        deadline = time.monotonic() + timeout
        while History.objects.filter(queue__name=queue).count() < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{queue}: {count} messages not drained in {timeout} s")
            time.sleep(0.05)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(60)
        Worker.objects.all().delete()  # gone at their exit
    span = History.objects.filter(queue__name=queue).aggregate(
        first=Min("claimed_at"), last=Max("finished_at"))
    return (span["last"] - span["first"]).total_seconds()


def limit_use(rated: int, slotted: int) -> dict[str, float]:
    """``rated`` messages through the rate-limited queue, ``slotted`` through the
    concurrency-limited one; each limit's use (1.0: to the full)."""
    import djqueue

    djqueue.create_queue("bench.rated", exist_ok=True, rate_limit=f"{RATE}/s")
    djqueue.create_queue("bench.slots", exist_ok=True, concurrency_limit=PLACES)
    djqueue.send_batch("bench.rated", [{"n": n} for n in range(rated)])
    rate_seconds = _drain("bench.rated", rated, timeout=rated / RATE * 3 + 30)
    djqueue.send_batch("bench.slots", [{"n": n} for n in range(slotted)])
    slots_seconds = _drain("bench.slots", slotted, timeout=slotted * WORK * 3 + 30)
    return {"rate_use": rated / rate_seconds / RATE,
            "concurrency_use": slotted * WORK / PLACES / slots_seconds}
