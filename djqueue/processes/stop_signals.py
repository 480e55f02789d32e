"""Two-stage SIGTERM/SIGINT handling for long-running processes.

The first signal asks for a graceful stop, the second for an immediate one.
The handler only records the signal and sets events (waking sleepers in this
process, and, where asked, a file descriptor a ``select`` loop waits on); the
process's own loop does the work. Handlers are restored on exit.
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


class StopSignals:
    def __init__(self) -> None:
        #: Set by the first stop signal (or a call to ``request``): stop gracefully.
        self.stop = threading.Event()
        #: Set by the second: stop at once.
        self.force = threading.Event()
        #: The stop signals received, in order (SIGTERM, SIGINT).
        self.received: list[int] = []
        #: With ``installed(wakeup_fd=True)``: readable after each signal.
        self.wakeup_fd: int | None = None

    def request(self) -> None:
        """Ask for a graceful stop, as a first signal would (e.g. from another thread)."""
        self.stop.set()
        local_wakeup.notify()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.stop.is_set():
            self.force.set()
        self.request()

    @contextlib.contextmanager
    def installed(self, *, wakeup_fd: bool = False) -> Iterator[StopSignals]:
        """Install the handlers (main thread only) and restore the previous ones on exit.
        ``wakeup_fd``: also make :attr:`wakeup_fd` readable after any signal (for a loop
        that blocks in ``select``)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        pipe = previous_fd = None
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
