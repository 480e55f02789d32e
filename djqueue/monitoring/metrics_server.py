"""``manage.py djqueue_metrics``: the Prometheus metrics on a port of their own, for
projects that do not serve them from their web server (see views.metrics). A SIGHUP
reload keeps its listening sockets, so no scrape is refused meanwhile."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from django.db import connections

from djqueue.monitoring.views import authorized, exposition
from djqueue.processes.base import ProcessBase
from djqueue.processes.listening_sockets import listening_sockets, urls

logger = logging.getLogger("djqueue.metrics")


class MetricsServer(ProcessBase):
    """Answers ``GET /metrics`` on ``host:port`` (each address ``host`` names) until a
    stop signal."""

    logger = logger
    judges_times = False

    def __init__(self, host: str, port: int,
                 on_serving: Callable[[str], None] | None = None) -> None:
        super().__init__()
        #: Bound here, or kept open by a reload (processes.listening_sockets); an HTTP
        #: server for each serves, and closes as it stops, a copy of it.
        self.listeners = listening_sockets(host, port)
        self.answering = _RequestsAnswering()
        self.servers = [_MetricsHTTPServer(listener.dup(), self.answering)
                        for listener in self.listeners]
        #: Told the metrics' URL once they are served, the stop signals installed by
        #: then: a SIGHUP sent on seeing it reloads the server, where it would have
        #: killed a process still starting (SIGHUP's default).
        self.on_serving = on_serving

    def main(self) -> int:
        for number, server in enumerate(self.servers):
            threading.Thread(target=server.serve_forever, name=f"djqueue-metrics-{number}",
                             daemon=True).start()
        url = urls(self.listeners, "/metrics")
        logger.info("Serving djqueue metrics on %s", url)
        if self.on_serving is not None:
            self.on_serving(url)
        self.stop_signals.stop.wait()
        return 0

    def shutdown(self) -> None:
        """Stop accepting, answer the scrapes accepted (within ANSWER_GRACE seconds),
        then close the copies: ``listeners`` stay open until the exit or a reload's exec.
        Every server is asked at once: each ``shutdown()`` waits up to its serving loop's
        0.5 s poll, which one after another would add up, an address at a time."""
        stopping = [threading.Thread(target=server.shutdown, name=f"djqueue-metrics-stop-{n}")
                    for n, server in enumerate(self.servers)]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()
        self.answering.wait_answered(ANSWER_GRACE)
        for server in self.servers:
            server.server_close()


#: Seconds a stopping server gives the scrapes it accepted (a database that does not
#: answer would hold one for ever); uvicorn gives its requests 5 s too.
ANSWER_GRACE = 5.0


class _RequestsAnswering:
    """The requests accepted and not yet answered, on every socket, so a stop answers
    them rather than cutting them (a reload's exec or the exit would reset their
    connections)."""

    def __init__(self) -> None:
        self.count = 0
        self._answered = threading.Condition()

    def add(self, change: int) -> None:
        with self._answered:
            self.count += change
            if self.count <= 0:  # all that wait_answered waits for
                self._answered.notify_all()

    def wait_answered(self, seconds: float) -> None:
        with self._answered:
            self._answered.wait_for(lambda: self.count <= 0, seconds)


class _MetricsHTTPServer(ThreadingHTTPServer):
    """Serves one listening socket, a thread a request, each counted in ``answering``."""

    daemon_threads = True

    def __init__(self, listener: socket.socket, answering: _RequestsAnswering) -> None:
        super().__init__(listener.getsockname()[:2], _MetricsRequest,
                         bind_and_activate=False)
        self.socket.close()  # the one it made, unbound
        self.socket = listener
        self.answering = answering

    def process_request(self, request: Any, client_address: Any) -> None:
        self.answering.add(1)  # counted before its thread starts, on the accepting thread
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.answering.add(-1)


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
