"""What a worker run by ``djqueue_worker --processes N`` reads from its supervisor, and
reports to it (djqueue.worker.supervisor): three variables the supervisor sets in each
child's environment, and what the child does before its command runs (``die_with``).
Kept apart from the supervisor, which a worker does not run.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from pathlib import Path

_PR_SET_PDEATHSIG = 1

#: The command runs as a worker, not as a supervisor.
SUPERVISED = "DJQUEUE_SUPERVISED"

#: Set when the supervisor keeps an alive file: the folder where each child keeps its
#: own, named by its pid.
ALIVE_FOLDER = "DJQUEUE_SUPERVISED_ALIVE_FOLDER"

#: A pipe's write end on which the worker reports that it has started work (registered,
#: its threads running): a reload asks an old worker to stop only then.
STARTED_FD = "DJQUEUE_SUPERVISED_STARTED_FD"


def is_supervised() -> bool:
    return os.environ.get(SUPERVISED) == "1"


def supervised_alive_file() -> Path | None:
    """This supervised worker's own alive file, if its supervisor keeps one."""
    folder = os.environ.get(ALIVE_FOLDER)
    return Path(folder) / str(os.getpid()) if folder else None


def report_started() -> None:
    """In a supervised worker that has started work: tell the supervisor, once. The
    variable goes with it, so a copy of the process run anew (same environment, the
    descriptor closed) does not write to whatever file then has that number."""
    fd = os.environ.pop(STARTED_FD, None)
    if fd is not None:
        with contextlib.suppress(OSError, ValueError):
            os.write(int(fd), b"1")
            os.close(int(fd))


def load_libc() -> ctypes.CDLL | None:
    """The C library, for prctl (loaded before fork: dlopen in a forked child may hang)."""
    return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with(libc: ctypes.CDLL | None, parent: int) -> None:
    """In the child before exec: receive SIGTERM when the supervisor dies (Linux)."""
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # it died before prctl took effect
            os._exit(1)
