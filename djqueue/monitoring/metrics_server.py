"""``manage.py djqueue_metrics``: the Prometheus metrics on a port of their own, for
projects that do not serve them from their web server (see views.metrics)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.db import connections

from djqueue.monitoring.views import authorized, exposition
from djqueue.processes.base import ProcessBase

logger = logging.getLogger("djqueue.metrics")


class MetricsServer(ProcessBase):
    """Answers ``GET /metrics`` on ``host:port`` until a stop signal."""

    logger = logger
    judges_times = False

    def __init__(self, host: str, port: int,
                 on_serving: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.server = ThreadingHTTPServer((host, port), _MetricsRequest)
        self.server.daemon_threads = True
        #: Told the metrics' URL once they are served, the stop signals installed by
        #: then: a SIGHUP sent on seeing it reloads the server, where it would have
        #: killed a process still starting (SIGHUP's default).
        self.on_serving = on_serving

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def main(self) -> int:
        serving = threading.Thread(target=self.server.serve_forever, name="djqueue-metrics",
                                   daemon=True)
        serving.start()
        url = "http://{}:{}/metrics".format(*self.address)
        logger.info("Serving djqueue metrics on %s", url)
        if self.on_serving is not None:
            self.on_serving(url)
        self.stop_signals.stop.wait()
        return 0

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _MetricsRequest(BaseHTTPRequestHandler):
    server_version = "djqueue-metrics"

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self._answer(404, b"Not found: the metrics are at /metrics\n", "text/plain")
            return
        if not authorized(self.headers.get("Authorization")):
            self._answer(401, b"A bearer token is needed.\n", "text/plain",
                         {"WWW-Authenticate": 'Bearer realm="djqueue metrics"'})
            return
        try:
            body, content_type = exposition(self.headers.get("Accept"))
        except Exception:
            logger.exception("Could not collect the metrics")
            self._answer(503, b"The metrics could not be read; see the log.\n", "text/plain")
            return
        finally:
            connections.close_all()  # this request's thread, and its connection, end here
        self._answer(200, body, content_type)

    def _answer(self, status: int, body: bytes, content_type: str,
                headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("%s " + format, self.address_string(), *args)
