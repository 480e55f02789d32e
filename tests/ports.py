"""Loopback ports for the servers the tests start. No Django here: tests/mysql_server.py
picks its server's port before Django is set up."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on the loopback address that nothing listens on right now (for a
    server a test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
