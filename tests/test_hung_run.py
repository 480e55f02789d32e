"""A run that hangs ends without leaving its processes behind (tests/conftest.py's
``pytest_timeout_set_timer``): a real pytest, hung in a test that started a process
(tests/hung_run_case.py), ended by pytest-timeout's thread method, as a hung CI run is.

It runs in the SQLite suite only: what it checks (pytest-timeout, the process tree)
is the same whatever the database, and each run of it costs 7-10 s.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import vendor

pytestmark = pytest.mark.skipif(vendor() != "sqlite",
                                reason="the same on every database: run in the SQLite suite")
ROOT = Path(__file__).resolve().parent.parent


def test_a_hung_run_stops_the_processes_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--timeout", "5", "-q",
         "tests/hung_run_case.py"],
        cwd=ROOT, env={**os.environ, "HUNG_CHILD_PID": str(pid_file)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = run.communicate(timeout=120)
        child = int(pid_file.read_text())
        state = _state(child)  # before the clean-up below
    finally:
        run.kill()
        if pid_file.exists() and "sleep" in _command(pid := int(pid_file.read_text())):
            os.kill(pid, signal.SIGKILL)  # what the hook missed is not left behind
    assert run.returncode == 1, output
    assert "Timeout" in output and "test_hangs_holding_a_process" in output, output
    assert "djqueue: stopped 1 processes the run started" in output, output
    # Killed, and reaped by init once its parent ended: no such process, or a zombie.
    assert state in ("gone", "Z"), state


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except FileNotFoundError:
        return ""
