"""Helpers for the servers the tests start (MariaDB, MySQL, PgBouncer, Prometheus and
the HTTP API's): a free loopback port, stopping a server process, or every process a
run started, and a port that forwards to a database server from a moment on. No Django
here: tests/mysql_server.py picks its server's port before Django is set up."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator


def free_port() -> int:
    """A TCP port on the loopback address that nothing listens on right now (for a
    server a test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used so far (user and system), in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: Seconds over which a process must be all but idle for :func:`until_idle`.
SETTLE = 0.2


def until_idle(pid: int, deadline: float) -> None:
    """Until process ``pid`` used at most a tenth of a core over SETTLE seconds: it has
    done with what it was given and sleeps (AssertionError at ``deadline``, a
    ``time.monotonic()``)."""
    used = cpu_seconds(pid)
    while True:
        time.sleep(SETTLE)
        now = cpu_seconds(pid)
        if now - used <= SETTLE / 10:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} was still busy (its last {SETTLE} s: "
                                 f"{now - used:.2f} s of CPU)")
        used = now


def stop_process(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM (a server's clean shutdown), then SIGKILL if it has not ended within
    ``grace`` seconds."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (children, theirs, ...), read from /proc, parents first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # pid (comm) state ppid ...: comm may hold spaces and parentheses
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        children.setdefault(ppid, []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def stop_descendants(grace: float) -> list[int]:
    """SIGTERM every process under this one, then SIGKILL those still running after
    ``grace`` seconds; the processes signalled. For a run about to end without its
    fixtures' teardown (see tests/conftest.py's timeout)."""
    signalled = descendants(os.getpid())
    for pid in signalled:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (running := [pid for pid in signalled if _running(pid)]) and (
            time.monotonic() < deadline):
        time.sleep(0.05)
    for pid in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return signalled


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (an ended child not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False



@contextlib.contextmanager
def tcp_forward(listen_port: int, to_port: int) -> Iterator[None]:
    """A database server appearing on ``listen_port`` while inside: every connection
    made to it is passed on to ``to_port`` on the loopback address, both ways, on
    threads (each pair's sockets are closed when either side closes, or on leaving)."""
    listener = socket.create_server(("127.0.0.1", listen_port))
    opened: list[socket.socket] = [listener]

    def pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for side in (source, sink):
            with contextlib.suppress(OSError):
                side.shutdown(socket.SHUT_RDWR)

    def accept() -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                client, _ = listener.accept()
                server = socket.create_connection(("127.0.0.1", to_port))
                opened.extend((client, server))
                for pair in ((client, server), (server, client)):
                    threading.Thread(target=pump, args=pair, daemon=True).start()

    threading.Thread(target=accept, daemon=True, name="tcp-forward").start()
    try:
        yield
    finally:
        for sock in opened:  # shut down first: on Linux only that wakes a blocked accept
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
