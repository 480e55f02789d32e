"""Serving an ASGI application with uvicorn on sockets the caller already listens on,
stopping as every djqueue process does: a stop signal ends it gracefully, without a
request lost to a reset.

``manage.py djqueue_http`` is its one user; uvicorn is the ``http`` extra, so the
command imports this module only as it serves.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

#: Seconds at most a stopping server waits for a connection it accepted to send its
#: first request. A client sends it as it connects, so it comes within a round trip,
#: but a client on a loaded host may be scheduled late: a fixed 0.2 s closed one such
#: connection unanswered in a CI run. A connection that never sends (or sends a
#: request's head slowly) holds the stop this long, and no longer.
UNREAD_GRACE = 5.0

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
        """uvicorn's, once each accepted connection has sent its first request (or
        UNREAD_GRACE seconds have passed).
        uvicorn's shutdown closes at once each connection with no request in
        progress, one accepted a moment before whose request is still unread
        included: that client was answered by a reset. So this server stops
        accepting first (connections waiting in the backlog go to the next server
        on a reload, or are refused on a stop), and waits for the ones it accepted
        to send their request, which uvicorn's shutdown then lets finish. An idle
        keep-alive connection, which has had its answer, is closed at once as
        before: a stop waits only for the requests that are on their way."""
        for accepting in self.servers:
            accepting.close()
        unread = sum(map(is_unread, self.server_state.connections))
        if unread:
            # uvicorn's own logger, so --log-level says whether it is shown.
            logging.getLogger("uvicorn.error").info(
                "Stopping: waiting up to %g s for %d accepted connection(s) to send "
                "their request", UNREAD_GRACE, unread)
        grace_ends = time.monotonic() + UNREAD_GRACE
        # force_exit: a second Ctrl+C, which cuts uvicorn's own waits short too.
        while any(map(is_unread, self.server_state.connections)) \
                and time.monotonic() < grace_ends and not self.force_exit:
            await asyncio.sleep(0.01)
        await super().shutdown(sockets)


def is_unread(connection: object) -> bool:
    """Whether a connection uvicorn accepted has yet to send a whole request head.
    uvicorn internals, read here alone: its HTTP protocols (h11's and httptools') hold
    the request they are answering as ``cycle``, None until the first request's head
    is read, and the last one's after, so None says exactly "accepted, no request
    yet". A protocol without one (a WebSocket's) is never waited for."""
    return getattr(connection, "cycle", False) is None


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
