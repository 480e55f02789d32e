"""What every long-running djqueue process shares: the worker, the reaper, the supervisor.

A process runs ``run()``: its stop signals are installed (two-stage: graceful,
then immediate), it registers itself, a heartbeat thread starts where the
process has one, ``main()`` runs until a stop is asked for, and then the
process shuts down and deregisters, in that order, whatever ended ``main()``.
A periodic process (the reaper) only writes ``tick()``: the base repeats it
every ``interval`` seconds, sleeping in a way a stop signal ends at once, and
survives database errors by closing its connection and trying again.

SIGHUP reloads a process: it stops gracefully, as on SIGTERM, and its command then
calls ``run_anew()`` (a supervisor instead replaces its workers one by one). The same
pid and arguments run the code deployed since, as a Gunicorn or Celery reload does,
without a service manager's restart.

Solid Queue's processes (runnable, interruptible, registrable) are the model;
here the hooks are plain methods with no-op defaults, so each process class
reads top to bottom.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

from django.db import DatabaseError, connections

from djqueue.processes.stop_signals import StopSignals
from djqueue.storage import dialects, host_clock


class ProcessBase:
    #: The logger of this kind of process (djqueue.worker, djqueue.reaper, ...).
    logger = logging.getLogger("djqueue")
    #: Seconds between heartbeats; None: the process has no heartbeat thread.
    heartbeat_interval: float | None = None
    #: Seconds between ticks of the default ``main()``.
    interval: float = 1.0
    #: Ask for a wake-up file descriptor on stop signals (a ``select`` loop).
    signal_fd: bool = False
    #: The process writes or judges times (lease ends, delays, retries): it compares
    #: its host's clock with the databases' as it starts and, from its heartbeat or its
    #: passes, every CLOCK_CHECK_INTERVAL seconds (djqueue.storage.host_clock). The
    #: supervisor and the metrics server do neither.
    judges_times: bool = True
    #: SIGHUP stops it, to be run anew (``runs_anew``); a supervisor only counts them.
    stops_on_reload: bool = True
    #: A file whose modification time the main loop refreshes, at most once a second,
    #: for a liveness probe to read (``--alive-file``); removed as the process ends.
    #: Written by the loop itself, so a loop that hangs lets it go stale.
    alive_file: Path | None = None
    _alive_at: float = 0.0
    _alive_failed: bool = False

    def __init__(self) -> None:
        self.stop_signals = StopSignals(stop_on_reload=self.stops_on_reload)
        self.clock_checks = host_clock.ClockChecks(self.logger, type(self).__name__)

    # What a process runs

    def run(self) -> int:
        """Run until stopped; returns the process's exit code."""
        with self.stop_signals.installed(wakeup_fd=self.signal_fd):
            if self.judges_times:
                self.clock_checks.check()
            self.register()
            self.show_alive()
            heartbeat = None
            if self.heartbeat_interval is not None:
                heartbeat = threading.Thread(target=self.beat_until_stopped, daemon=True,
                                             name=f"djqueue-heartbeat-{type(self).__name__}")
                heartbeat.start()
            try:
                return self.main()
            finally:
                try:
                    self.shutdown()
                finally:
                    self.stop_signals.stop.set()
                    if heartbeat is not None:
                        heartbeat.join(timeout=5)
                    self.deregister()
                    # Run anew, the process keeps its file, which a probe would miss.
                    if self.alive_file is not None and not self.runs_anew:
                        self.alive_file.unlink(missing_ok=True)

    def main(self) -> int:
        """Repeat ``tick()`` every ``interval`` seconds until stopped (comparing the
        clocks after a tick when due, unless a heartbeat thread does)."""
        while True:
            self.show_alive()
            self.tick_safely()
            if self.heartbeat_interval is None:
                self.check_clock_when_due()
            if self.sleep_showing_alive(self.interval):
                return 0

    def tick_safely(self) -> None:
        """One ``tick()``; a database error is logged and its connection closed, so the
        next tick starts on a fresh one."""
        try:
            self.tick()
        except DatabaseError:
            self.logger.exception("%s pass failed; retrying", type(self).__name__)
            connections[dialects.alias()].close()

    def show_alive(self) -> None:
        """Refresh ``alive_file``'s modification time if a second has passed since the
        last (called by the main loop on each round). A failure to write it is logged
        once, until a write succeeds again: the probe then restarts the process."""
        if self.alive_file is None or time.monotonic() - self._alive_at < 1.0:
            return
        self._alive_at = time.monotonic()
        try:
            self.alive_file.touch()
            shown = self.alive_since()
            if shown is not None:
                os.utime(self.alive_file, (shown, shown))
        except OSError as exc:
            if not self._alive_failed:
                self.logger.error("%s: cannot write its alive file %s: %s",
                                  type(self).__name__, self.alive_file, exc)
            self._alive_failed = True
        else:
            self._alive_failed = False

    def alive_since(self) -> float | None:
        """The time ``alive_file`` shows, if not now: a process whose life is that of
        other processes too (the supervisor's workers) shows the stalest of them."""
        return None

    def check_clock_when_due(self) -> None:
        """Compare the clocks again once CLOCK_CHECK_INTERVAL has passed, if the process
        judges times; a database error is passed over, as at the start."""
        if self.judges_times:
            self.clock_checks.check_when_due()

    def tick(self) -> object:
        """One pass of a periodic process's work (what it returns is the subclass's:
        the reaper's report of its pass)."""

    # Hooks (no-ops by default)

    def register(self) -> None:
        """Announce the process before it starts work (e.g. its row and session lock)."""

    def deregister(self) -> None:
        """Withdraw what ``register`` announced, last of all."""

    def heartbeat(self) -> None:
        """Show the process alive, every ``heartbeat_interval`` seconds."""

    def shutdown(self) -> None:
        """Stop gracefully after ``main()`` ended: finish or hand back what is held."""

    # Stopping and sleeping

    @property
    def stopping(self) -> bool:
        return self.stop_signals.stop.is_set()

    @property
    def runs_anew(self) -> bool:
        """A SIGHUP (or a worker's recycle) stopped it, and no stop signal came after: its
        command runs it anew."""
        return self.stop_signals.runs_anew

    def stop(self) -> None:
        """Ask the process to stop gracefully (from another thread, or a test)."""
        self.stop_signals.request()

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, ended at once by a stop; True if stopping."""
        return self.stop_signals.stop.wait(seconds)

    def sleep_showing_alive(self, seconds: float) -> bool:
        """``sleep``, refreshing the alive file each second meanwhile (a reaper may pass
        a minute between passes); True if stopping."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 1.0 and self.alive_file is not None:
            if self.sleep(1.0):
                return True
            self.show_alive()
        return self.sleep(max(left, 0.0))

    def beat_until_stopped(self) -> None:
        assert self.heartbeat_interval is not None
        while not self.sleep(self.heartbeat_interval):
            try:  # a thread that died would stop the beats of a live process for good
                self.heartbeat()
                self.check_clock_when_due()
            except Exception:
                self.logger.exception("%s: a heartbeat failed; the next tries again",
                                      type(self).__name__)
        connections.close_all()  # the heartbeat thread's own connections


def run_anew() -> NoReturn:
    """Replace this process with a fresh copy of itself: the same pid and arguments,
    the code on disk now (after a reload, or to be rid of handler threads stuck past
    their time limit). Logs are flushed and connections closed first."""
    logging.shutdown()
    connections.close_all()
    os.execv(sys.executable, [sys.executable, *sys.argv])
