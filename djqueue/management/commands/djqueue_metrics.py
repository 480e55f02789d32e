from typing import Any

from django.core.management.base import CommandError, CommandParser

from djqueue.management.database_ready import DatabaseReadyCommand
from djqueue.monitoring.metrics_server import MetricsServer
from djqueue.processes.base import run_anew
from djqueue.processes.listening_sockets import keep_for_run_anew


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(text)
    return value


class Command(DatabaseReadyCommand):
    help = ("Serve djqueue's Prometheus metrics at http://HOST:PORT/metrics until stopped "
            "(SIGTERM or SIGINT).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1",
                            help="Address to listen on (default 127.0.0.1).")
        parser.add_argument("--port", type=port, default=9808,
                            help="Port to listen on (default 9808; 0: any free port, printed).")

    def waits_for_database(self, options: dict[str, Any]) -> bool:
        """A long-running process: it waits for its database."""
        return True

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        try:
            server = MetricsServer(host, port, on_serving=self.say_serving)
        except OSError as exc:
            raise CommandError(f"Cannot listen on {host}:{port}: "
                               f"{exc.strerror or exc}") from None
        server.run()
        if server.runs_anew:  # SIGHUP: the code deployed since, on the same socket
            keep_for_run_anew(server.listener)
            run_anew()

    def say_serving(self, url: str) -> None:
        """The start line, once the server answers and its signals are handled."""
        self.stdout.write(f"Serving djqueue metrics on {url}")
        self.stdout.flush()
