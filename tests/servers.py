"""Helpers for the servers the tests start (MariaDB, MySQL, PgBouncer, Prometheus and
the HTTP API's): a free loopback port, and stopping a server process. No Django here:
tests/mysql_server.py picks its server's port before Django is set up."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A TCP port on the loopback address that nothing listens on right now (for a
    server a test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM (a server's clean shutdown), then SIGKILL if it has not ended within
    ``grace`` seconds."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)
