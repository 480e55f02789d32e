"""Serving an ASGI application with uvicorn on sockets the caller already listens on,
stopping as every djqueue process does: a stop signal ends it gracefully, without a
request lost to a reset.

``manage.py djqueue_http`` is its one user; uvicorn is the ``http`` extra, so the
command imports this module only as it serves.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

#: Seconds a stopping server goes on reading the connections it accepted before
#: closing those with no request: a client sends its request as it connects, so it
#: arrives within a round trip.
ACCEPTED_GRACE = 0.2

#: The signals that stop the server (SIGHUP alone: to run anew, processes.base).
STOP_SIGNALS = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)


class GracefulServer(uvicorn.Server):
    """uvicorn's server that says when it serves, and stops accepting before it closes
    what it accepted."""

    def __init__(self, config: uvicorn.Config, on_serving: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_serving = on_serving

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_serving()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's, after up to ACCEPTED_GRACE seconds of accepting nothing more
        (until no connection is open, if sooner).
        Its shutdown closes at once each connection with no request in progress,
        one accepted a moment before included: that client's request, in flight
        or unread, was then answered by a reset (once in a CI run's reloads).
        Given the grace, the request arrives and is answered; connections
        waiting in the backlog go to the next server (a reload) or are refused
        (a stop)."""
        for accepting in self.servers:
            accepting.close()
        # uvicorn's own record of the open connections (its shutdown reads it
        # too): with none, nothing is in flight, and a stop takes no grace.
        grace_ends = time.monotonic() + ACCEPTED_GRACE
        while self.server_state.connections and time.monotonic() < grace_ends:
            await asyncio.sleep(0.01)
        await super().shutdown(sockets)


def serve(application: Any, listeners: list[socket.socket], *, log_level: str,
          on_serving: Callable[[], None]) -> list[int]:
    """Serve ``application`` on copies of ``listeners`` (uvicorn closes the sockets it
    serves as it stops; the caller's stay open for a run anew) until a stop signal;
    the signals that stopped it, in the order they came."""
    # No lifespan: Django's ASGI handler does not take lifespan events.
    server = GracefulServer(uvicorn.Config(application, log_level=log_level,
                                           lifespan="off", timeout_graceful_shutdown=5),
                            on_serving)
    asked: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        """Stop as uvicorn's graceful shutdown does (its own handlers replace this one
        for SIGTERM and SIGINT while it serves, and call it after). Handled from the
        start, a stop signal sent on seeing the start line, or before it, stops the
        server gracefully rather than killing it, and the command exits 0 as the other
        djqueue processes do."""
        asked.append(signum)
        server.should_exit = True

    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    try:
        server.run(sockets=[listener.dup() for listener in listeners])
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return asked
