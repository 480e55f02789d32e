"""Where a send's extra time goes when the database server shares the machine's cores.

    .venv/bin/python bench/affinity.py [--rounds N]     (make bench-affinity)

Runs the insert comparison of ``make bench`` (measures.inserts: raw single-row
inserts against ``djqueue.send``, taking turns) in alternating rounds: with the
client and the local MariaDB free to run on any core, as ``make bench`` runs,
and with MariaDB's threads on core 0 and this process on core 1. The server's
affinity is restored afterwards. A diagnosis, not a target: it needs root, a
local MariaDB server and two cores.

Why: on the 2-core development machine a send's Python costs several times its
own time once it runs between round trips (16 µs in a hot loop, ~100 µs of wall
time per send in the loop; the server's thread spends ~170 µs of CPU per
insert). With the two kept apart the ratio shows how much of the gap is that
sharing rather than the send's own work (2026-11-25, three rounds each: 0.69
shared, 0.88 apart, where the raw insert itself slows from 4,183 to 2,985/s).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator

import measures
from common import BENCH_DB, buffer_pool, drop_database, fresh_database


def server_threads() -> list[int]:
    found = subprocess.run(["pidof", "mariadbd", "mysqld"], capture_output=True, text=True)
    pids = found.stdout.split()
    if not pids:
        raise SystemExit("affinity: no local mariadbd/mysqld process to place")
    return [int(tid) for pid in pids for tid in os.listdir(f"/proc/{pid}/task")]


@contextlib.contextmanager
def apart() -> Iterator[None]:
    """MariaDB's threads on core 0, this process on core 1; restored on exit."""
    threads = server_threads()
    before = {tid: os.sched_getaffinity(tid) for tid in threads}
    mine = os.sched_getaffinity(0)
    try:
        for tid in threads:
            os.sched_setaffinity(tid, {0})
        os.sched_setaffinity(0, {1})
        yield
    finally:
        os.sched_setaffinity(0, mine)
        for tid, cpus in before.items():
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(tid, cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--url", default=f"mysql://root@127.0.0.1:3306/{BENCH_DB}")
    args = parser.parse_args()
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("affinity: needs two cores")
    admin = fresh_database(args.url)
    ratios: dict[str, list[float]] = {"shared": [], "apart": []}
    rates: dict[str, list[float]] = {"shared": [], "apart": []}
    with buffer_pool(admin):
        for i in range(args.rounds):
            for layout in ("shared", "apart"):
                if layout == "apart":
                    with apart():
                        found = measures.inserts(args.url, args.messages)
                else:
                    found = measures.inserts(args.url, args.messages)
                ratios[layout].append(found["send_1"] / found["raw_insert_1"])
                rates[layout].append(found["raw_insert_1"])
                print(f"round {i + 1} {layout:6}: send {found['send_1']:,.0f}/s, raw "
                      f"{found['raw_insert_1']:,.0f}/s, ratio {ratios[layout][-1]:.3f}",
                      flush=True)
    drop_database(admin)
    for layout in ratios:
        print(f"{layout:6} send/raw median {statistics.median(ratios[layout]):.3f} "
              f"(raw {statistics.median(rates[layout]):,.0f}/s)")


if __name__ == "__main__":
    sys.exit(main())
