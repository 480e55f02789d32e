"""What every long-running djqueue process shares: the worker, the reaper, the supervisor.

A process runs ``run()``: its stop signals are installed (two-stage: graceful,
then immediate), it registers itself, a heartbeat thread starts where the
process has one, ``main()`` runs until a stop is asked for, and then the
process shuts down and deregisters, in that order, whatever ended ``main()``.
A periodic process (the reaper) only writes ``tick()``: the base repeats it
every ``interval`` seconds, sleeping in a way a stop signal ends at once, and
survives database errors by closing its connection and trying again.

Solid Queue's processes (runnable, interruptible, registrable) are the model;
here the hooks are plain methods with no-op defaults, so each process class
reads top to bottom.
"""

from __future__ import annotations

import logging
import threading

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

    def __init__(self) -> None:
        self.stop_signals = StopSignals()
        self.clock_checks = host_clock.ClockChecks(self.logger, type(self).__name__)

    # What a process runs

    def run(self) -> int:
        """Run until stopped; returns the process's exit code."""
        with self.stop_signals.installed(wakeup_fd=self.signal_fd):
            if self.judges_times:
                self.clock_checks.check()
            self.register()
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

    def main(self) -> int:
        """Repeat ``tick()`` every ``interval`` seconds until stopped."""
        while True:
            self.tick_safely()
            self.check_clock_when_due()
            if self.sleep(self.interval):
                return 0

    def tick_safely(self) -> None:
        """One ``tick()``; a database error is logged and its connection closed, so the
        next tick starts on a fresh one."""
        try:
            self.tick()
        except DatabaseError:
            self.logger.exception("%s pass failed; retrying", type(self).__name__)
            connections[dialects.alias()].close()

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

    def stop(self) -> None:
        """Ask the process to stop gracefully (from another thread, or a test)."""
        self.stop_signals.request()

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, ended at once by a stop; True if stopping."""
        return self.stop_signals.stop.wait(seconds)

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
