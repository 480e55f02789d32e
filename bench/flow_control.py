"""What the semantics of issue #4 cost per send, against plain send() in the same run.

    .venv/bin/python bench/flow_control.py [--messages N] [--url mysql://...]

Measures single sends per second into: a plain queue (the baseline), a queue
with max_depth at depth 0 and with 10,000 messages already pending, an
ordered queue (100 group keys), dedup keys, and trace on. Prints ratios and
writes bench/results/flow_control.json.
"""

from __future__ import annotations

import argparse
import json
import time

from common import BENCH_DB, drop_database, fresh_database, results_dir


def timed_sends(queue: str, n: int, **kwargs_for) -> float:
    import djqueue

    started = time.perf_counter()
    for i in range(n):
        extra = {k: f(i) for k, f in kwargs_for.items()}
        djqueue.send(queue, {"n": i, "pad": "x" * 60}, **extra)
    return n / (time.perf_counter() - started)


def threaded_drain(queue: str, groups: int, per_group: int, threads: int = 8) -> float:
    """Messages/s for ``threads`` receive(20)+ack_many loops over a prefilled queue."""
    import threading

    from django.db import connections

    import djqueue

    total = groups * per_group
    for start in range(0, total, 1000):
        djqueue.send_batch(queue, [{"n": n} for n in range(start, min(total, start + 1000))],
                           group_keys=[f"g{n % groups}" for n in range(start, min(total, start + 1000))])
    done = [0]
    lock = threading.Lock()

    def loop() -> None:
        while True:
            got = djqueue.receive(queue, max_messages=20, wait=0.5)
            with lock:
                done[0] += len(djqueue.ack_many(got))
                if done[0] >= total:
                    break
        connections.close_all()

    started = time.perf_counter()
    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return total / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--url", default=f"mysql://root@127.0.0.1:3306/{BENCH_DB}")
    args = parser.parse_args()
    admin = fresh_database(args.url)
    import djqueue

    n = args.messages
    for name, options in [("plain", {}), ("depth0", {"max_depth": 10**7}),
                          ("depth10k", {"max_depth": 10**7}), ("ordered", {"ordered": True}),
                          ("dedup", {}), ("traced", {"trace": True})]:
        djqueue.create_queue(name, **options)
    djqueue.send_batch("depth10k", [{"n": i} for i in range(10_000)])
    rates = {
        "plain send (baseline)": timed_sends("plain", n),
        "max_depth, 0 pending": timed_sends("depth0", n),
        "max_depth, 10,000 pending": timed_sends("depth10k", n),
        "ordered, 100 group keys": timed_sends("ordered", n, group_key=lambda i: f"k{i % 100}"),
        "dedup_key (all distinct)": timed_sends("dedup", n, dedup_key=lambda i: f"d{i}"),
        "trace on": timed_sends("traced", n),
    }
    drains = {
        "unordered queue (baseline)": threaded_drain(
            djqueue.create_queue("drain.plain").name, 50, 100),
        "ordered queue, 50 groups": threaded_drain(
            djqueue.create_queue("drain.ordered", ordered=True).name, 50, 100),
    }
    base = rates["plain send (baseline)"]
    print(f"\n{'single send() into':32} {'msgs/s':>8}  ratio  extra ms/send")
    rows = []
    for label, value in rates.items():
        extra_ms = (1 / value - 1 / base) * 1000
        rows.append({"case": label, "rate": value, "ratio": value / base, "extra_ms": extra_ms})
        print(f"{label:32} {value:8.0f}  {value / base:5.2f}  {extra_ms:8.2f}")
    print(f"\n{'8 threads draining 5,000 msgs':32} {'msgs/s':>8}  ratio")
    for label, value in drains.items():
        ratio = value / drains["unordered queue (baseline)"]
        rows.append({"case": f"drain: {label}", "rate": value, "ratio": ratio})
        print(f"{label:32} {value:8.0f}  {ratio:5.2f}")
    out = results_dir()
    (out / "flow_control.json").write_text(json.dumps({"messages": n, "rows": rows}, indent=2))
    drop_database(admin)


if __name__ == "__main__":
    main()
