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

import logging
import signal
import sys
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
        # Here, not at the top: uvicorn is the ``http`` extra.
        from djqueue.http import serving
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

        asked = serving.serve(application, listeners, log_level=str(options["log_level"]),
                              on_serving=say_serving)
        # SIGHUP alone: run anew on the code deployed since, as every djqueue process
        # does (processes.base); a stop signal after it: stop for good.
        if asked and set(asked) == {signal.SIGHUP}:
            keep_for_run_anew(listeners)
            run_anew()
