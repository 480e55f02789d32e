"""``make soak``: the fault scenarios at full size, on a private MariaDB, with a table.

    .venv/bin/python -m tests.faults.soak [--scale 1.0] [--port 3308]

Sizes at scale 1: scenario 1 with 1,000,000 messages, 2, 3 and 5 with 200,000,
4 with 40 slow handlers, 6 with 10,000 good and 300 poison messages. Producers
send at a fixed rate the workers can keep up with, so the end-to-end latency
shows the faults, not a backlog. Writes var/soak.json; exits 1 if anything was
lost or a scenario did not finish.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--port", type=int, default=3308)
    parser.add_argument("--only", default="123456", help="Scenario numbers to run.")
    args = parser.parse_args()
    from tests.faults import scenarios
    from tests.faults.harness import Cluster, table, write_json
    from tests.faults.server import PrivateMariaDB

    def size(n: int) -> int:
        return max(1, int(n * args.scale))

    server = PrivateMariaDB(ROOT / "var" / "soak-mariadb", args.port)
    server.install()
    server.start()
    server.recreate()
    runs = {
        "1": lambda c: scenarios.worker_kill_storm(c, size(1_000_000), rate=1_000),
        "2": lambda c: scenarios.database_crash(c, size(200_000), rate=1_000),
        "3": lambda c: scenarios.connection_drops(c, size(200_000), rate=1_000),
        "4": lambda c: scenarios.slow_handlers(c, max(2, size(40) // 2 * 2)),
        "5": lambda c: scenarios.exactly_once_storm(c, size(200_000), rate=600),
        "6": lambda c: scenarios.poison_messages(c, size(10_000), max(1, size(100))),
    }
    reports = []
    try:
        Cluster(server, ROOT / "var" / "soak" / "setup").manage(
            "migrate", "--run-syncdb", "--noinput", "-v0")
        for key in args.only:
            started = time.monotonic()
            cluster = Cluster(server, ROOT / "var" / "soak" / f"scenario-{key}")
            try:
                reports.append(runs[key](cluster))
            finally:
                cluster.stop_all()
            print(f"scenario {key} done in {time.monotonic() - started:.0f} s: "
                  f"{reports[-1].row()}", flush=True)
            write_json(reports, ROOT / "var" / "soak.json")
    finally:
        server.stop()
    print()
    print(table(reports))
    bad = [r for r in reports if r.lost or r.notes.get("timed_out") or r.notes.get("left_pending")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
