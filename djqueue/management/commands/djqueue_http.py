"""Serve the project over ASGI with uvicorn, for the HTTP API's long polls (and the rest
of the project's URLs): ``manage.py djqueue_http --port 8001``.

Any ASGI server will do (``uvicorn project.asgi:application``, daphne, hypercorn);
this command is the one that needs no module path: it serves ``ASGI_APPLICATION``.

SIGHUP reloads it without refusing a connection: the listening sockets (one for each
address ``--host`` names) are this command's own, handed to uvicorn as copies, and
kept open across the ``exec`` of ``run_anew`` (djqueue.processes.listening_sockets);
uvicorn binding its own would close them, and refuse connections, for the seconds of
the restart.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
import time
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.utils.module_loading import import_string

from djqueue.conf import get_settings
from djqueue.management.arguments import whole_number
from djqueue.management.database_ready import DatabaseReadyCommand
from djqueue.processes.base import run_anew
from djqueue.processes.listening_sockets import (
    CannotListen,
    keep_for_run_anew,
    listening_sockets,
    urls,
)
from djqueue.storage import host_clock

#: Seconds a stopping server goes on reading the connections it accepted before
#: closing those with no request: a client sends its request as it connects, so it
#: arrives within a round trip.
ACCEPTED_GRACE = 0.2


class Command(DatabaseReadyCommand):
    help = "Serve the project (and its djqueue HTTP API) over ASGI with uvicorn."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1",
                            help="Address or host name to listen on, each of its addresses "
                                 "(default 127.0.0.1; \"\": every interface).")
        parser.add_argument("--port", type=whole_number(0, 65535), default=8001)
        parser.add_argument("--log-level", default="warning",
                            choices=["critical", "error", "warning", "info", "debug"])

    def waits_for_database(self, options: dict[str, Any]) -> bool:
        """A long-running process: it waits for its database."""
        return True

    def handle(self, *args: object, **options: Any) -> None:
        import uvicorn

        from djqueue.http.asgi import with_api

        path = getattr(settings, "ASGI_APPLICATION", None)
        if path:
            application = import_string(path)
        else:
            from django.core.asgi import get_asgi_application

            application = get_asgi_application()
        application = with_api(application)  # no-op if project/asgi.py did it
        # Its receives stamp lease ends by the database's clock, as a worker's claims do:
        # compared as it starts, it warns of a far clock before it serves.
        host_clock.compare_clocks(logging.getLogger("djqueue.http"), "HTTP API server")
        switch = get_settings().WORKER_SWITCH_INTERVAL
        if switch is not None:
            # As in workers: the event loop and the database threads hand the GIL to each
            # other on every request; Python's 5 ms would let one wait that long.
            sys.setswitchinterval(switch)
        host, port = str(options["host"]), int(options["port"])
        try:
            listeners = listening_sockets(host, port)
        except CannotListen as error:
            raise CommandError(str(error)) from None
        def say_serving() -> None:
            self.stdout.write(f"Serving the project and its djqueue HTTP API on "
                              f"{urls(listeners)}")
            self.stdout.flush()

        class Server(uvicorn.Server):
            """Says it serves once it does; stops accepting before it closes what it
            accepted."""

            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets)
                if self.started:
                    say_serving()

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

        # No lifespan: Django's ASGI handler does not take lifespan events.
        server = Server(uvicorn.Config(
            application, log_level=str(options["log_level"]), lifespan="off",
            timeout_graceful_shutdown=5))
        asked: list[int] = []

        def stop(signum: int, frame: FrameType | None) -> None:
            """Stop as uvicorn's graceful shutdown does (its own handlers replace this one
            for SIGTERM and SIGINT while it serves, and call it after). SIGHUP alone:
            then run anew on the code deployed since, as every djqueue process does
            (processes.base). Handled from the start, a stop signal sent on seeing the
            start line, or before it, stops the server gracefully rather than killing
            it, and the command exits 0 as the other djqueue processes do."""
            asked.append(signum)
            server.should_exit = True

        previous = {number: signal.signal(number, stop)
                    for number in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
        try:
            # Copies: uvicorn closes the sockets it serves as it stops.
            server.run(sockets=[listener.dup() for listener in listeners])
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
        if asked and set(asked) == {signal.SIGHUP}:  # a stop signal after it: for good
            keep_for_run_anew(listeners)
            run_anew()
