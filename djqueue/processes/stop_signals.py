"""Two-stage SIGTERM/SIGINT handling, and SIGHUP's reload, for long-running processes.

The first signal asks for a graceful stop, the second for an immediate one.
The handler only records the signal and writes a byte to a pipe; a small
thread reads the pipe and sets the events that wake sleepers in this process
(and, where asked, Python writes a file descriptor a ``select`` loop waits
on). The process's own loop does the work. Handlers are restored on exit.

Why the thread: a Python signal handler runs in the main thread between two
bytecodes, wherever that thread is, even inside ``Event.wait`` holding the
event's lock, which ``Event.set`` would then wait for forever; and a second
signal's handler can run nested inside the first one's, so a handler that
tested "already stopping?" could see "no" twice and never force the stop
(a worker given SIGTERM then SIGINT at once waited out its whole grace
period about one run in fifteen). The handler takes no lock, and the thread
counts the signals in order.

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
#: What the handler writes to the watcher's pipe for each kind of signal.
_STOP_BYTE, _RELOAD_BYTE = 0, 1


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
        self._pipe: tuple[int, int] | None = None
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

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # list.append and os.write take no lock a nested or interrupted caller may hold.
        # Both are counted here, on the main thread, before a select it interrupted
        # returns: a loop that looks after its select sees them.
        if signum == RELOAD_SIGNAL:
            self.reloads += 1
        else:
            self.received.append(signum)
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                os.write(self._pipe[1], bytes([_RELOAD_BYTE if signum == RELOAD_SIGNAL
                                               else _STOP_BYTE]))

    def _apply_signals(self, kinds: bytes) -> None:
        """More signals arrived (on the watcher thread, in order): a stop signal stops,
        one more (or one after ``request``) forces; a reload stops, unless one was asked
        for already or this process only counts reloads."""
        with self._deciding:
            for kind in kinds:
                if kind == _RELOAD_BYTE:
                    if self.stop_on_reload and not self.stop.is_set():
                        self.runs_anew = True
                        self.request()
                    continue
                if self.stop.is_set() and not self.runs_anew:
                    self.force.set()
                self.runs_anew = False
                self.request()

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
        self._pipe = os.pipe()
        os.set_blocking(self._pipe[1], False)
        watcher = threading.Thread(target=self._watch, args=(self._pipe[0],), daemon=True,
                                   name="djqueue-stop-signals")
        watcher.start()
        previous = {sig: signal.signal(sig, self._handle)
                    for sig in (*STOP_SIGNALS, RELOAD_SIGNAL)}
        pipe: tuple[int, int] | None = None
        previous_fd = -1
        if wakeup_fd:
            pipe = os.pipe()
            for end in pipe:
                os.set_blocking(end, False)
            previous_fd = signal.set_wakeup_fd(pipe[1])
            self.wakeup_fd = pipe[0]
        try:
            yield self
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
            read_end, write_end = self._pipe
            self._pipe = None
            os.close(write_end)  # ends the watcher once it has read what was written
            watcher.join(timeout=5)
            os.close(read_end)
            if pipe is not None:
                signal.set_wakeup_fd(previous_fd)
                self.wakeup_fd = None
                for end in pipe:
                    os.close(end)

    def drain_wakeup_fd(self) -> None:
        """Empty :attr:`wakeup_fd` after a ``select`` found it readable."""
        if self.wakeup_fd is None:
            return
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wakeup_fd, 512):
                pass
