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

SIGHUP reloads (after a deploy): the supervisor starts a fresh worker, and once it has
started work (it reports so through a pipe, ``STARTED_FD``) asks one of the old ones to
stop gracefully, and so on until every worker runs the code deployed now. So no more
than one worker more than N runs at a time, and no fewer than N serve, as Gunicorn's
reload and a rolling deploy's surge of one do. A fresh worker that fails to start (a
broken deploy) is retried with the growing pause, while the old workers keep working;
a later SIGHUP starts the reload over. With ``--burst`` a SIGHUP is ignored.

What a child reads from its supervisor, and reports to it, is in
djqueue.worker.supervised.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from djqueue.processes.base import ProcessBase
from djqueue.worker.supervised import ALIVE_FOLDER, STARTED_FD, SUPERVISED, die_with, load_libc

logger = logging.getLogger("djqueue.supervisor")

#: A child that fails sooner than this after its start counts as failing at start.
QUICK_FAILURE = 10.0
#: The longest pause before replacing a child that keeps failing at start.
MAX_PAUSE = 30.0


@dataclass
class Child:
    popen: subprocess.Popen
    started: float
    #: The reload it was started in (the supervisor's ``generation`` then).
    generation: int
    #: The read end of its STARTED_FD pipe, until it reports or ends.
    started_fd: int | None
    #: How many of the supervisor's stop signals it has been sent (a reload's stop counts).
    signalled: int = 0
    #: It has reported that it started work.
    working: bool = False


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
    #: Reloads taken (SIGHUPs); children of an earlier one are being replaced.
    generation: int = 0
    #: Fresh children still to start for the reload in progress, one at a time.
    to_reload: int = 0

    logger = logger
    stops_on_reload = False  # it replaces its workers instead
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
            while self.children or ((self.due or self.to_reload) and not self.stops):
                self.show_alive()
                self._wait()
                self._forward_stops()
                self._take_reload()
                self._reap()
                self._start_due()
                self._reload_next()
                self._retire_replaced()
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
        reports = {c.started_fd: c for c in self.children.values() if c.started_fd is not None}
        readable, _, _ = select.select([*reports, *([wake] if wake is not None else [])],
                                       [], [], timeout)
        self.stop_signals.drain_wakeup_fd()
        for fd in set(readable) & set(reports):
            child = reports[fd]
            child.working = bool(os.read(fd, 1))  # nothing: it ended without starting
            self._close_started_fd(child)

    @staticmethod
    def _close_started_fd(child: Child) -> None:
        if child.started_fd is not None:
            os.close(child.started_fd)
            child.started_fd = None

    def _start(self) -> None:
        parent, libc = os.getpid(), load_libc()
        report_end, write_end = os.pipe()
        env = {**os.environ, SUPERVISED: "1", STARTED_FD: str(write_end)}
        if self.children_alive is not None:
            env[ALIVE_FOLDER] = str(self.children_alive)
        try:
            popen = subprocess.Popen(list(self.argv), env=env, pass_fds=(write_end,),
                                     process_group=0,
                                     preexec_fn=lambda: die_with(libc, parent))
        except BaseException:
            os.close(report_end)
            raise
        finally:
            os.close(write_end)
        self.children[popen.pid] = Child(popen, time.monotonic(), self.generation, report_end)
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
            self._close_started_fd(child)
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
            if child.generation < self.generation:  # replaced by a reload: not again
                logger.log(logging.INFO if code in (0, -signal.SIGTERM) else logging.WARNING,
                           "Worker process %d (replaced) exited with %s", pid,
                           _describe(code))
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

    def _take_reload(self) -> None:
        """After a SIGHUP: every child now running, or starting, is to be replaced by a
        fresh one."""
        if self.stop_signals.reloads == self.generation:
            return
        self.generation = self.stop_signals.reloads
        if self.stops or not self.replace:  # stopping, or --burst: nothing is replaced
            return
        self.to_reload = self.processes - len(self.due)
        logger.info("Reloading: replacing %d worker processes one by one", self.processes)

    def _reload_next(self) -> None:
        """Start the reload's next fresh child once the last one has started work and no
        replacement waits out its pause."""
        if not self.to_reload or self.stops or self.due or any(
                not c.working for c in self.children.values()
                if c.generation == self.generation):
            return
        self.to_reload -= 1
        self._start()

    def _retire_replaced(self) -> None:
        """Ask the oldest children of earlier reloads to stop while, without them, N
        would still work: one for each fresh child that has started work."""
        fresh = sum(c.working for c in self.children.values()
                    if c.generation == self.generation)
        replaced = sorted((c for c in self.children.values()
                           if c.generation < self.generation and not c.signalled),
                          key=lambda c: c.started)
        while replaced and fresh + len(replaced) > self.processes:
            child = replaced.pop(0)
            logger.info("Worker process %d is replaced; asking it to stop", child.popen.pid)
            self._ask_to_stop(child)

    @staticmethod
    def _ask_to_stop(child: Child) -> None:
        """A graceful stop, as a first stop signal passed on (so a later stop of the
        supervisor passes on only the second, which forces it)."""
        if not child.signalled:
            child.popen.send_signal(signal.SIGTERM)
            child.signalled = 1


def _describe(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"code {code}"
