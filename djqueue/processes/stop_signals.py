"""Two-stage SIGTERM/SIGINT handling, and SIGHUP's reload, for long-running processes.

The first signal asks for a graceful stop, the second for an immediate one.
Python's own handler for each only makes it write the signal's number to a pipe
(``signal.set_wakeup_fd``); a small thread reads the pipe, counts the signals in
order and sets the events that wake sleepers in this process (and, where asked,
writes a byte to a descriptor a ``select`` loop waits on). The process's own loop
does the work. Handlers and the wake-up descriptor are restored on exit.

Why the pipe and the thread: the kernel gives a signal sent to the process to any of
its threads that does not block it, and a Python handler runs only on the main
thread, between two bytecodes. A main thread blocked in ``Event.wait`` does not wake
for a signal another thread took (``djqueue_metrics``, whose request threads took
some, waited for a reload for ever; docs/operations.md). The pipe is
written in the C handler, by whichever thread took the signal, at once. The thread
also keeps the signals' order where handlers would not: a Python handler runs wherever
the main thread is, even inside ``Event.wait`` holding the event's lock (which
``Event.set`` would then wait for forever), and a second signal's handler can run
nested inside the first one's, so a handler that tested "already stopping?" could see
"no" twice and never force the stop.

SIGHUP asks for a reload (as Gunicorn's and Celery's do): a process stops
gracefully, as on a first stop signal, with ``runs_anew`` set, and its command then
runs a fresh copy of itself (``run_anew``: the same pid and arguments, the code
deployed now); a supervisor, made with ``stop_on_reload=False``, only counts it and
replaces its workers one by one. A worker that recycles itself (stuck handler threads,
``--max-rss``) asks for the same stop with ``stop_to_run_anew``. A stop signal after
either cancels the run anew and does not force the stop: it is the first stop asked
for, so a service manager's SIGTERM during a recycle's drain ends the process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from djqueue.polling import local_wakeup

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RELOAD_SIGNAL = signal.SIGHUP


class StopSignals:
    def __init__(self, *, stop_on_reload: bool = True) -> None:
        #: Whether SIGHUP stops this process gracefully (to be run anew), or is only
        #: counted in ``reloads`` (a supervisor's reload: it replaces its workers).
        self.stop_on_reload = stop_on_reload
        #: SIGHUPs received.
        self.reloads = 0
        #: A SIGHUP or ``stop_to_run_anew`` stopped the process, and no stop signal came
        #: after it: its command runs it anew.
        self.runs_anew = False
        #: Set by the first stop signal (or a call to ``request``): stop gracefully.
        self.stop = threading.Event()
        #: Set by the second: stop at once.
        self.force = threading.Event()
        #: The stop signals received, in order (SIGTERM, SIGINT).
        self.received: list[int] = []
        #: With ``installed(wakeup_fd=True)``: readable after each signal.
        self.wakeup_fd: int | None = None
        #: ``wakeup_fd``'s pipe, written by the watcher thread after each signal.
        self._select_pipe: tuple[int, int] | None = None
        # Between the watcher thread's signals and a worker loop's stop_to_run_anew: a
        # SIGTERM applied between the latter's test and its setting would be undone.
        self._deciding = threading.Lock()

    def request(self) -> None:
        """Ask for a graceful stop, as a first signal would (e.g. from another thread)."""
        self.stop.set()
        local_wakeup.notify()

    def stop_to_run_anew(self) -> None:
        """Ask for a graceful stop after which the process runs anew, as a SIGHUP does,
        unless a stop was asked for already (a worker recycling itself)."""
        with self._deciding:
            if not self.stop.is_set():
                self.runs_anew = True
                self.request()

    def _apply_signals(self, numbers: bytes) -> None:
        """More signals arrived (on the watcher thread, in order): a stop signal stops,
        one more (or one after ``request``) forces; a reload stops, unless one was asked
        for already or this process only counts reloads. Others (a supervisor's SIGCHLD)
        only wake a ``select`` loop."""
        with self._deciding:
            for number in numbers:
                if number == RELOAD_SIGNAL:
                    self.reloads += 1
                    if self.stop_on_reload and not self.stop.is_set():
                        self.runs_anew = True
                        self.request()
                elif number in STOP_SIGNALS:
                    self.received.append(number)
                    if self.stop.is_set() and not self.runs_anew:
                        self.force.set()
                    self.runs_anew = False
                    self.request()
        if self._select_pipe is not None:  # counted first: the loop it wakes sees them
            with contextlib.suppress(OSError):
                os.write(self._select_pipe[1], b"\0")

    def _watch(self, read_end: int) -> None:
        while True:
            try:
                data = os.read(read_end, 64)
            except OSError:
                return
            if not data:  # the write end was closed: the handlers are gone
                return
            self._apply_signals(data)

    @contextlib.contextmanager
    def installed(self, *, wakeup_fd: bool = False) -> Iterator[StopSignals]:
        """Install the handlers (main thread only) and restore the previous ones on exit.
        ``wakeup_fd``: also make :attr:`wakeup_fd` readable after any signal (for a loop
        that blocks in ``select``)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # as set_wakeup_fd asks: a handler never blocks
        if wakeup_fd:
            self._select_pipe = os.pipe()
            for end in self._select_pipe:
                os.set_blocking(end, False)
            self.wakeup_fd = self._select_pipe[0]
        watcher = threading.Thread(target=self._watch, args=(read_end,), daemon=True,
                                   name="djqueue-stop-signals")
        watcher.start()
        previous_fd = signal.set_wakeup_fd(write_end)
        previous = {sig: signal.signal(sig, _written_to_the_pipe)
                    for sig in (*STOP_SIGNALS, RELOAD_SIGNAL)}
        try:
            yield self
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
            signal.set_wakeup_fd(previous_fd)
            os.close(write_end)  # ends the watcher once it has read what was written
            watcher.join(timeout=5)
            os.close(read_end)
            if self._select_pipe is not None:
                self.wakeup_fd = None
                for end in self._select_pipe:
                    os.close(end)
                self._select_pipe = None

    def drain_wakeup_fd(self) -> None:
        """Empty :attr:`wakeup_fd` after a ``select`` found it readable."""
        if self.wakeup_fd is None:
            return
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wakeup_fd, 512):
                pass


def _written_to_the_pipe(signum: int, frame: FrameType | None) -> None:
    """Python's handler: the signal's number was written to the wake-up pipe as it came
    (by C code, on whichever thread took it), and the watcher thread acts on it there.
    Installed so that the signal neither kills the process nor is ignored."""
