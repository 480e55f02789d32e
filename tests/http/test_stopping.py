"""A stopping API server (a stop signal, or SIGHUP to run anew) answers each connection
it had accepted whose request had not arrived yet, and waits for no idle keep-alive
connection: ``djqueue.http.serving``. Real processes, real sockets, real signals.

Each test makes the race the reload test catches now and then (a client connected just
before the stop, its request not yet read) happen every time: the request's head is
left unfinished until the server says it is stopping."""

import http.client
import signal
import socket
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.http.conftest import MOUNT
from tests.servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)

SERVING = "Serving the project and its djqueue HTTP API on "
WAITING = "Stopping: waiting up to 5 s for {} accepted connection(s) to send their request"
#: A request's head, all but its closing blank line.
UNFINISHED_HEAD = f"GET {MOUNT}openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()


def accept_queue(port: int) -> int:
    """How many connections wait in 127.0.0.1:``port``'s listening socket for the server
    to accept them: the kernel's count (a listening socket's rx_queue in /proc/net/tcp).
    0 after a connect: the server has accepted that connection."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
            return int(queues.split(":")[1], 16)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def start(spawn, port: int):
    server = spawn("djqueue_http", "--port", str(port), "--log-level", "info")
    wait_until(lambda: SERVING in server.output(), 60, "its start line")
    return server


def accepted(port: int) -> socket.socket:
    """A connection the server has accepted, its request's head sent but for its end."""
    client = socket.create_connection(("127.0.0.1", port), timeout=30)
    client.sendall(UNFINISHED_HEAD)
    wait_until(lambda: accept_queue(port) == 0, 30, "the server to accept the connection")
    return client


def read_to_end(client: socket.socket) -> bytes:
    received = b""
    while chunk := client.recv(65536):
        received += chunk
    return received


def test_a_request_sent_after_a_reload_began_on_a_connection_accepted_before_is_answered(
        spawn):
    port = free_port()
    server = start(spawn, port)
    with accepted(port) as client:
        server.signal(signal.SIGHUP)
        wait_until(lambda: WAITING.format(1) in server.output(), 30, "the stop to wait")
        client.sendall(b"Connection: close\r\n\r\n")
        answer = read_to_end(client)
    # Before, uvicorn's shutdown closed this connection unanswered: b"" here.
    assert answer.startswith(b"HTTP/1.1 200 "), (answer[:300], server.output())
    assert b'"openapi"' in answer
    wait_until(lambda: server.output().count(SERVING) == 2, 60, "its second start")
    server.signal(signal.SIGTERM)
    assert server.wait(60) == 0, server.output()


def test_a_stop_waits_for_no_idle_keep_alive_connection_and_for_a_silent_one_boundedly(
        spawn):
    """An idle keep-alive connection has had its answer: not waited for (the log counts
    one connection of the two). One that never sends holds the stop UNREAD_GRACE
    seconds, then is closed: the server exits 0 and both connections read their end."""
    port = free_port()
    server = start(spawn, port)
    idle = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    idle.request("GET", f"{MOUNT}openapi.json")
    response = idle.getresponse()
    assert response.status == 200 and response.read()
    assert not response.will_close  # the connection stays open, idle
    with accepted(port) as silent:
        server.signal(signal.SIGTERM)
        assert server.wait(60) == 0, server.output()
        assert read_to_end(silent) == b""
    assert idle.sock is not None and idle.sock.recv(1) == b""
    idle.close()
    assert WAITING.format(1) in server.output(), server.output()
