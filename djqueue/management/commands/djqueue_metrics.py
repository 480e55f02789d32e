"""``manage.py djqueue_metrics``: serve djqueue's Prometheus metrics on a port of their
own (djqueue.monitoring.metrics_server) until a stop signal; SIGHUP runs it anew on the
code deployed since, on the same listening sockets."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from djqueue.management.arguments import whole_number
from djqueue.management.database_ready import DatabaseReadyCommand
from djqueue.monitoring.metrics_server import MetricsServer
from djqueue.processes.base import run_anew
from djqueue.processes.listening_sockets import CannotListen, keep_for_run_anew


class Command(DatabaseReadyCommand):
    help = ("Serve djqueue's Prometheus metrics at http://HOST:PORT/metrics until stopped "
            "(SIGTERM or SIGINT).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1",
                            help="Address or host name to listen on, each of its addresses "
                                 "(default 127.0.0.1; \"\": every interface).")
        parser.add_argument("--port", type=whole_number(0, 65535), default=9808,
                            help="Port to listen on (default 9808; 0: any free port, printed).")

    def waits_for_database(self, options: dict[str, Any]) -> bool:
        """A long-running process: it waits for its database."""
        return True

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        try:
            server = MetricsServer(host, port, on_serving=self.say_serving)
        except CannotListen as error:
            raise CommandError(str(error)) from None
        server.run()
        if server.runs_anew:  # SIGHUP: the code deployed since, on the same socket
            keep_for_run_anew(server.listeners)
            run_anew()

    def say_serving(self, url: str) -> None:
        """The start line, once the server answers and its signals are handled."""
        self.stdout.write(f"Serving djqueue metrics on {url}")
        self.stdout.flush()
