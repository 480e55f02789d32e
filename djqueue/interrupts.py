"""Two-stage SIGTERM/SIGINT handling for long-running processes.

The first signal asks for a graceful stop, the second for an immediate one.
Handlers only set events (and wake sleepers); the loops do the work.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from djqueue.wakeup import wakeup

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupts:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.force = threading.Event()
        self.received: list[str] = []

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signal.Signals(signum).name)
        if self.stop.is_set():
            self.force.set()
        self.stop.set()
        wakeup.notify()

    @contextlib.contextmanager
    def installed(self) -> Iterator[Interrupts]:
        """Install the handlers (main thread only) and restore the previous ones on exit."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        try:
            yield self
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
