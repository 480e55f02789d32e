"""Serve the project over ASGI with uvicorn, for the HTTP API's long polls (and the rest
of the project's URLs): ``manage.py djqueue_http --port 8001``.

Any ASGI server will do (``uvicorn project.asgi:application``, daphne, hypercorn);
this command is the one that needs no module path: it serves ``ASGI_APPLICATION``.

SIGHUP reloads it without refusing a connection: the listening socket is this
command's own, handed to uvicorn as a copy, and kept open across the ``exec`` of
``run_anew``. Connections that come while the old code drains and the new code starts
wait in the socket's backlog and are answered by the new code, as Gunicorn's reload
does; uvicorn binding its own socket would close it, and refuse them, for those seconds.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.utils.module_loading import import_string

from djqueue.conf import get_settings
from djqueue.management.arguments import whole_number
from djqueue.management.database_ready import DatabaseReadyCommand
from djqueue.processes.base import run_anew
from djqueue.storage import host_clock

#: Set across a reload's exec: the number of the listening socket's file descriptor,
#: which the new code serves instead of binding anew (and removes from its environment).
LISTENING_FD = "DJQUEUE_HTTP_LISTENING_FD"


class Command(DatabaseReadyCommand):
    help = "Serve the project (and its djqueue HTTP API) over ASGI with uvicorn."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
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
        host_clock.warn_if_far(logging.getLogger("djqueue.http"), "HTTP API server")
        switch = get_settings().WORKER_SWITCH_INTERVAL
        if switch is not None:
            # As in workers: the event loop and the database threads hand the GIL to each
            # other on every request; Python's 5 ms would let one wait that long.
            sys.setswitchinterval(switch)
        listener = listening_socket(str(options["host"]), int(options["port"]))
        # No lifespan: Django's ASGI handler does not take lifespan events.
        server = uvicorn.Server(uvicorn.Config(
            application, log_level=str(options["log_level"]), lifespan="off",
            timeout_graceful_shutdown=5))
        reloads: list[int] = []

        def reload(signum: int, frame: FrameType | None) -> None:
            """SIGHUP: stop as on SIGTERM (uvicorn's graceful shutdown), then run anew on
            the code deployed since, as every djqueue process does (processes.base)."""
            reloads.append(signum)
            server.should_exit = True

        previous = signal.signal(signal.SIGHUP, reload)
        host, port = listener.getsockname()[:2]
        self.stdout.write(f"Serving the project and its djqueue HTTP API on "
                          f"http://{f'[{host}]' if ':' in host else host}:{port}/")
        self.stdout.flush()
        try:
            # A copy: uvicorn closes the sockets it serves as it stops.
            server.run(sockets=[listener.dup()])
        finally:
            signal.signal(signal.SIGHUP, previous)
        if reloads:
            os.set_inheritable(listener.fileno(), True)
            os.environ[LISTENING_FD] = str(listener.fileno())
            run_anew()


def listening_socket(host: str, port: int) -> socket.socket:
    """The socket to serve: the one a reload kept open, or a new one bound to
    ``host:port`` (a clear error if it cannot be)."""
    inherited = os.environ.pop(LISTENING_FD, None)
    if inherited is not None:
        try:
            listener = socket.socket(fileno=int(inherited))
        except (ValueError, OSError) as error:
            raise CommandError(f"{LISTENING_FD}={inherited!r} is not the listening "
                               f"socket a reload keeps open: {error}") from None
        listener.set_inheritable(False)
        return listener
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        # uvicorn's own backlog, so a reload's seconds fill it no sooner than before.
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as error:
        raise CommandError(f"cannot listen on {host}:{port}: "
                           f"{error.strerror or error}") from None
