"""Not collected by the suite (no ``test_`` prefix): tests/test_hung_run.py runs it in a
pytest of its own, where it hangs holding a process, for pytest-timeout to end."""

import os
import subprocess
import threading
from pathlib import Path


def test_hangs_holding_a_process() -> None:
    child = subprocess.Popen(["sleep", "600"])
    Path(os.environ["HUNG_CHILD_PID"]).write_text(str(child.pid))
    threading.Event().wait()  # never set: the hang pytest-timeout ends
