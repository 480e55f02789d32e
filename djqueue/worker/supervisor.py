"""Several worker processes under one command: ``djqueue_worker --processes N``.

The supervisor starts N copies of its own command line as children, each a
plain worker (``SUPERVISED`` in its environment says so), and keeps N running:
a child that exits is replaced, at once if it ended well (``--max-messages`` or
``--max-seconds`` reached: that is how children are recycled) and after a
growing pause if it failed soon after it started. With ``--burst`` nothing is
replaced and the supervisor ends with its last child.

With ``--alive-file``, each child keeps a file of its own in a folder the supervisor
makes, and the supervisor's file shows the stalest of their times (its own loop's
when it is staler): a worker whose loop hangs lets the supervisor's file go stale, so
a liveness probe restarts the whole, as it would a single worker. A child that has
not written its file yet (it is starting, or waiting for its database) counts as
fresh, as a single worker's file does not exist until it has started.

Each SIGTERM or SIGINT is passed on to every child as it came (the first two:
the second asks each worker to stop at once), and the supervisor exits when
the children have. Children live in their own process group, so a
Ctrl-C in a terminal reaches them through the supervisor only, and once; on
Linux a child also receives SIGTERM if the supervisor itself dies.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from djqueue.processes.base import ProcessBase

logger = logging.getLogger("djqueue.supervisor")

#: Set in a child's environment: the command runs as a worker, not as a supervisor.
SUPERVISED = "DJQUEUE_SUPERVISED"
#: A child that fails sooner than this after its start counts as failing at start.
QUICK_FAILURE = 10.0
#: The longest pause before replacing a child that keeps failing at start.
MAX_PAUSE = 30.0
_PR_SET_PDEATHSIG = 1


#: Set in a child's environment when the supervisor keeps an alive file: the folder
#: where each child keeps its own, named by its pid.
ALIVE_FOLDER = "DJQUEUE_SUPERVISED_ALIVE_FOLDER"


def is_supervised() -> bool:
    return os.environ.get(SUPERVISED) == "1"


def supervised_alive_file() -> Path | None:
    """This supervised worker's own alive file, if its supervisor keeps one."""
    folder = os.environ.get(ALIVE_FOLDER)
    return Path(folder) / str(os.getpid()) if folder else None


@dataclass
class Child:
    popen: subprocess.Popen
    started: float
    #: How many of the supervisor's stop signals it has been sent.
    signalled: int = 0


@dataclass(eq=False)
class Supervisor(ProcessBase):
    judges_times = False  # its workers compare their clocks themselves
    #: The children's command line.
    argv: Sequence[str]
    processes: int
    #: Replace children that exit (False with --burst).
    replace: bool = True
    children: dict[int, Child] = field(default_factory=dict)
    #: Children that failed at start in a row; the pause before the next one grows with it.
    failures: int = 0
    #: Monotonic times at which a replacement is due.
    due: list[float] = field(default_factory=list)
    #: Every child that ended once the supervisor was stopping (or for good) ended well.
    clean: bool = True
    #: Where the children keep their alive files (with ``alive_file`` only).
    children_alive: Path | None = None

    logger = logger
    #: The loop blocks in ``select`` on the stop signals' wake-up descriptor.
    signal_fd = True

    def __post_init__(self) -> None:
        ProcessBase.__init__(self)

    @property
    def stops(self) -> list[int]:
        """Stop signals received (SIGTERM/SIGINT), the first two of which are passed on
        as they came: two of one kind sent to a child at once could merge into one."""
        return self.stop_signals.received

    def main(self) -> int:
        """Supervise until stopped (or, without ``replace``, until every child ended);
        0 when every child ended well, else 1."""
        # SIGCHLD only wakes the select (through the wake-up descriptor).
        previous = signal.signal(signal.SIGCHLD, lambda *_: None)
        if self.alive_file is not None:
            self.children_alive = Path(tempfile.mkdtemp(prefix="djqueue-alive-"))
        try:
            for _ in range(self.processes):
                self._start()
            while self.children or (self.due and not self.stops):
                self.show_alive()
                self._wait()
                self._forward_stops()
                self._reap()
                self._start_due()
        finally:
            signal.signal(signal.SIGCHLD, previous)
            if self.children_alive is not None:
                shutil.rmtree(self.children_alive, ignore_errors=True)
        return 0 if self.clean else 1

    def alive_since(self) -> float | None:
        """The stalest of its children's alive files' times; a child yet to write its
        file counts as now."""
        if self.children_alive is None:
            return None
        times = []
        for pid in self.children:
            try:
                times.append((self.children_alive / str(pid)).stat().st_mtime)
            except FileNotFoundError:  # starting, or waiting for its database
                continue
        return min(times, default=None)

    def _wait(self) -> None:
        timeout = None
        if self.due and not self.stops:
            timeout = max(0.0, min(self.due) - time.monotonic())
        wake = self.stop_signals.wakeup_fd
        if wake is None:  # not the main thread (no signals): look again every 0.5 s
            timeout = 0.5 if timeout is None else min(timeout, 0.5)
        if self.alive_file is not None:  # refreshed each second, by this loop
            timeout = 1.0 if timeout is None else min(timeout, 1.0)
        select.select([wake] if wake is not None else [], [], [], timeout)
        self.stop_signals.drain_wakeup_fd()

    def _start(self) -> None:
        parent, libc = os.getpid(), _libc()
        env = {**os.environ, SUPERVISED: "1"}
        if self.children_alive is not None:
            env[ALIVE_FOLDER] = str(self.children_alive)
        popen = subprocess.Popen(list(self.argv), env=env,
                                 process_group=0, preexec_fn=lambda: _die_with(libc, parent))
        self.children[popen.pid] = Child(popen, time.monotonic())
        logger.info("Started worker process %d (%d of %d)", popen.pid, len(self.children),
                    self.processes)
        self._forward_stops()  # a stop that came while it started

    def _forward_stops(self) -> None:
        for child in self.children.values():
            while child.signalled < min(len(self.stops), 2):
                child.popen.send_signal(self.stops[child.signalled])
                child.signalled += 1

    def _reap(self) -> None:
        for pid, child in list(self.children.items()):
            code = child.popen.poll()
            if code is None:
                continue
            del self.children[pid]
            if self.children_alive is not None:  # a killed child leaves its file; a
                # later child given the same pid must not be judged by it
                (self.children_alive / str(pid)).unlink(missing_ok=True)
            if self.stops or not self.replace:
                # Killed by a stop signal passed on: it came before the child installed
                # its handlers, so before it registered or claimed anything.
                ok = code == 0 or -code in self.stops
                self.clean = self.clean and ok
                logger.log(logging.INFO if ok else logging.WARNING,
                           "Worker process %d exited with %s", pid, _describe(code))
                continue
            pause = self._pause_after(code, time.monotonic() - child.started)
            logger.log(logging.INFO if code == 0 else logging.WARNING,
                       "Worker process %d exited with %s; starting another in %.1f s",
                       pid, _describe(code), pause)
            self.due.append(time.monotonic() + pause)

    def _pause_after(self, code: int, lived: float) -> float:
        if code == 0 or lived >= QUICK_FAILURE:
            self.failures = 0
            return 0.0
        self.failures += 1
        return min(MAX_PAUSE, 0.5 * 2 ** (self.failures - 1))

    def _start_due(self) -> None:
        if self.stops:
            self.due.clear()
            return
        now = time.monotonic()
        for at in [at for at in self.due if at <= now]:
            self.due.remove(at)
            self._start()


def _describe(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"code {code}"


def _libc() -> ctypes.CDLL | None:
    """The C library, for prctl (loaded before fork: dlopen in a forked child may hang)."""
    return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with(libc: ctypes.CDLL | None, parent: int) -> None:
    """In the child before exec: receive SIGTERM when the supervisor dies (Linux)."""
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # it died before prctl took effect
            os._exit(1)
