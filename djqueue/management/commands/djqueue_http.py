"""Serve the project over ASGI with uvicorn, for the HTTP API's long polls (and the rest
of the project's URLs): ``manage.py djqueue_http --port 8001``.

Any ASGI server will do (``uvicorn project.asgi:application``, daphne, hypercorn);
this command is the one that needs no module path: it serves ``ASGI_APPLICATION``.

SIGHUP reloads it without refusing a connection: the listening socket is this
command's own, handed to uvicorn as a copy, and kept open across the ``exec`` of
``run_anew`` (djqueue.processes.listening_sockets); uvicorn binding its own would close
it, and refuse connections, for the seconds of the restart.
"""

from __future__ import annotations

import logging
import signal
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
from djqueue.processes.listening_sockets import keep_for_run_anew, listening_socket, url_host
from djqueue.storage import host_clock


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
        host, port = str(options["host"]), int(options["port"])
        try:
            listener = listening_socket(host, port)
        except OSError as error:
            raise CommandError(f"Cannot listen on {host}:{port}: "
                               f"{error.strerror or error}") from None
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
        self.stdout.write(f"Serving the project and its djqueue HTTP API on "
                          f"http://{url_host(listener)}/")
        self.stdout.flush()
        try:
            # A copy: uvicorn closes the sockets it serves as it stops.
            server.run(sockets=[listener.dup()])
        finally:
            signal.signal(signal.SIGHUP, previous)
        if reloads:
            keep_for_run_anew(listener)
            run_anew()
