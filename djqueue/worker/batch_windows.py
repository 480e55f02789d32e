"""A batch handler's window: its short lists held back, up to ``batch_wait`` seconds, to
fill from later claims (Oban's chunk timeout, an SQS event source's batching window).

Why in the worker's loop, not on a handler thread: the messages are claimed, with
their leases running, and only the loop claims more. It keeps a list a queue open;
a list goes to a handler thread when it is full or when its first message has waited
``batch_wait``, whichever comes first. A worker with no window never builds one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from djqueue.exceptions import ConfigurationError
from djqueue.models import Message, Queue

if TYPE_CHECKING:
    from djqueue.worker.registry import Handler


def batch_windows(handlers: dict[str, Handler], queues: Sequence[Queue],
                  lease: float | None) -> dict[str, tuple[int, float]]:
    """The windows of a worker's queues: queue name → (batch, batch_wait). Refused
    (ConfigurationError) where a window is not shorter than the lease (``lease``: the
    worker's --visibility-timeout, else each queue's): its messages would be handed
    on to another worker before their run began."""
    windows = {}
    for queue in queues:
        entry = handlers[queue.name]
        if entry.batch is None or entry.batch_wait is None:
            continue
        seconds = lease if lease is not None else queue.visibility_timeout
        if entry.batch_wait >= seconds:
            raise ConfigurationError(
                f"The batch_wait of queue {queue.name!r} ({entry.batch_wait:g} s) must be "
                f"shorter than its lease ({seconds:g} s): its messages wait out the window "
                "claimed.")
        windows[queue.name] = (entry.batch, entry.batch_wait)
    return windows


class BatchWindows:
    """The open lists of the queues whose batch handler has a ``batch_wait``."""

    def __init__(self, windows: dict[str, tuple[int, float]]) -> None:
        #: queue name → (its batch handler's ``batch``, its ``batch_wait`` in seconds)
        self.windows = windows
        self._open: dict[str, tuple[float, list[Message]]] = {}
        #: Messages in open lists: claimed, and not yet on a handler thread.
        self.held = 0

    def __bool__(self) -> bool:
        return bool(self.windows)

    def add(self, runs: Sequence[Message | list[Message]]) -> list[Message | list[Message]]:
        """The runs of a claim that go to the handler threads now; the lists of a queue
        with a window join its open list, which goes once full."""
        ready: list[Message | list[Message]] = []
        for run in runs:
            if not isinstance(run, list) or (
                    window := self.windows.get(run[0].queue.name)) is None:
                ready.append(run)
                continue
            batch, wait = window
            name = run[0].queue.name
            for message in run:
                if name not in self._open:
                    self._open[name] = (time.monotonic() + wait, [])
                opened = self._open[name][1]
                opened.append(message)
                self.held += 1
                if len(opened) >= batch:
                    ready.append(self._close(name))
        return ready

    def due(self) -> list[list[Message]]:
        """The open lists whose first message has waited its window out."""
        if not self._open:
            return []
        now = time.monotonic()
        return [self._close(name) for name, (until, _) in list(self._open.items())
                if until <= now]

    def next_due(self) -> float | None:
        """When the first open list is due (a monotonic time), or None."""
        return min((until for until, _ in self._open.values()), default=None)

    def take_all(self) -> list[Message]:
        """Every message of the open lists (the worker is stopping: they are released)."""
        return [m for name in list(self._open) for m in self._close(name)]

    def _close(self, name: str) -> list[Message]:
        _, messages = self._open.pop(name)
        self.held -= len(messages)
        return messages
