"""The benchmarks still run: each script behind ``make bench*`` at its smallest sizes,
to its end, writing a number for every row it reports.

Speed is not judged here: the benches compare ratios within their own runs
(docs/performance.md), and the two with a target in milliseconds run with
``--no-time-target``, so only a query count that grows with the data fails them.
This keeps a change to djqueue's internals from breaking a bench unnoticed, as
one did on 2026-11-27 (``make bench`` failed in its django.tasks row for most of
a day, while ``make test`` passed).

Two benches are left to their own ``make`` targets, because they change settings
of the shared servers that other tests use: bench/affinity.py pins MariaDB's
threads to one core, and bench/postgres_churn.py switches the PostgreSQL server's
autovacuum.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.mysql_only]


def postgres_reachable() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
    except OSError:
        return False
    return True


#: Each bench: its command line (smallest sizes) and the results file it writes.
BENCHES = {
    "suite (make bench)": (["bench/suite.py", "--quick", "--repeats", "1"], "suite.json"),
    "databases (make bench-databases)": (
        ["bench/databases.py", "--smoke", "--no-peers", "--only",
         "mariadb,postgresql,sqlite" if postgres_reachable() else "mariadb,sqlite"],
        "databases.json"),
    "flow control (make bench-flow)": (["bench/flow_control.py", "--messages", "500"],
                                       "flow_control.json"),
    "dashboard (make bench-dashboard)": (
        ["bench/dashboard.py", "--messages", "1000", "--finished", "1000", "--repeats", "1",
         "--no-time-target"],
        "dashboard.json"),
    "metrics (make bench-metrics)": (
        ["bench/metrics.py", "--messages", "1000", "--finished", "1000", "--queues", "3",
         "--repeats", "1", "--no-time-target"], "metrics.json"),
    "export (make bench-export)": (["bench/export.py", "--rows", "2000"], "export.json"),
}


def numbers(found: object) -> Iterator[float]:
    """Every number in a results document (booleans are not numbers here)."""
    if isinstance(found, dict):
        for value in found.values():
            yield from numbers(value)
    elif isinstance(found, list):
        for value in found:
            yield from numbers(value)
    elif isinstance(found, int | float) and not isinstance(found, bool):
        yield float(found)


@pytest.mark.parametrize("name", list(BENCHES))
def test_a_bench_runs_to_its_end(name: str, tmp_path: Path) -> None:
    command, results = BENCHES[name]
    # The bench sets up its own settings and databases; this run's must not leak in.
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env["DJQUEUE_BENCH_RESULTS"] = str(tmp_path)
    run = subprocess.run([sys.executable, *command], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 0, f"{name} failed:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    found = json.loads((tmp_path / results).read_text())
    values = list(numbers(found))
    assert values, f"{results} holds no number"
    assert all(math.isfinite(v) for v in values), f"{results} holds NaN or infinity"
    print(f"{name}: {len(values)} numbers in {results}")
