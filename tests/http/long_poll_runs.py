"""Long polls on a running API server, and messages sent one by one to them: what the
long-poll test (tests/http/test_long_polls.py) checks and what the long-poll row of
bench/databases.py times, written once for both.

The waiters talk plain HTTP/1.1 on asyncio streams, one connection each: a client
library's pool of a thousand connections cost more than the server's delivery (it
measured ~60 ms), and a thousand streams cost the client little.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from tests.servers import until_idle

#: Seconds between two sends: each delivery is timed on its own.
SEND_EVERY = 0.05
#: Seconds a waiter's receive waits (the API's longest long poll).
WAIT = 20


class HttpConnection:
    """One keep-alive HTTP/1.1 connection that posts JSON and reads JSON back."""

    def __init__(self, base: str, token: str) -> None:
        url = urlsplit(base)
        self.host, self.port, self.mount = url.hostname or "127.0.0.1", url.port, url.path
        self.token = token

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def send_post(self, path: str, body: dict) -> None:
        data = json.dumps(body).encode()
        self.writer.write(
            f"POST {self.mount}{path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        await self.writer.drain()

    async def read_answer(self) -> tuple[int, dict]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        length = next(int(line.split(":", 1)[1]) for line in lines
                      if line.lower().startswith("content-length:"))
        return status, json.loads(await self.reader.readexactly(length))

    async def post(self, path: str, body: dict) -> tuple[int, dict]:
        await self.send_post(path, body)
        return await self.read_answer()

    def close(self) -> None:
        self.writer.close()


def port_of(base: str) -> int:
    """The TCP port of the server whose API is at ``base``."""
    port = urlsplit(base).port
    assert port is not None, base
    return port


async def open_long_poll(base: str, token: str, path: str, body: dict) -> HttpConnection:
    """A connection to the API at ``base`` that has posted ``body`` to ``path`` and not
    read the answer (a receive with ``wait`` in ``body`` is a long poll)."""
    connection = HttpConnection(base, token)
    await connection.open()
    await connection.send_post(path, body)
    return connection


def connections_to(port: int) -> int:
    """TCP connections established to ``port`` on this host, counted on the server's
    side (a connection its client closed is no longer ESTABLISHED there)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                count += fields[1].endswith(f":{port:04X}") and fields[3] == "01"
    return count


async def until_server_idle(pid: int, deadline: float) -> None:
    """tests.servers.until_idle, in a thread: the event loop's waiters go on meanwhile."""
    await asyncio.to_thread(until_idle, pid, deadline)


async def until_in_line(base: str, server_pid: int, count: int, deadline: float,
                        while_waiting: Callable[[], None] = lambda: None) -> None:
    """Until the server at ``base`` (process ``server_pid``) holds ``count`` connections
    and has done with their requests, so its long polls stand in their lines; calls
    ``while_waiting`` between looks (AssertionError at ``deadline``, a ``time.monotonic()``)."""
    port = port_of(base)
    while connections_to(port) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the server held {connections_to(port)} of {count} "
                                 "connections")
        while_waiting()
        await asyncio.sleep(0.02)
    await until_server_idle(server_pid, deadline)


class LongPolls:
    """Waiting receives on queue ``queue`` of the server at ``base`` (process
    ``server_pid``), each acking what it gets and then ending; then sends, each timed
    to its delivery."""

    def __init__(self, base: str, token: str, queue: str, server_pid: int) -> None:
        self.base, self.token, self.queue, self.server_pid = base, token, queue, server_pid
        self.waiters: list[asyncio.Future] = []
        self.requested = 0
        self.delivered: dict[int, float] = {}
        self.sent: dict[int, float] = {}
        #: Seconds from the start of the last ``open`` until the server was done with
        #: the long polls it opened (its last tests.servers.SETTLE seconds included).
        self.intake = 0.0

    async def warm(self, requests: int = 40) -> None:
        """Enough concurrent short receives to start every database thread of the server,
        and its first long poll (the server registers, with a session lock, at the first)."""
        async def one() -> None:
            connection = HttpConnection(self.base, self.token)
            await connection.open()
            try:
                status, body = await connection.post(f"queues/{self.queue}/receive",
                                                      {"wait": 0.1})
                assert status == 200, body
            finally:
                connection.close()

        await asyncio.gather(*(one() for _ in range(requests)))

    async def open(self, count: int, timeout: float = 60) -> None:
        """Start ``count`` long polls; return once each has sent its request, the
        server has accepted each one's connection, and it has done with them: each
        receive first claims at once (a statement on one of the server's database
        threads), so a thousand arriving together keep it busy for about a second,
        and a send meanwhile would be timed behind them."""
        started = time.monotonic()
        self.waiters += [asyncio.ensure_future(self._wait_for_one()) for _ in range(count)]
        deadline = time.monotonic() + timeout
        while self.requested < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.requested} of {count} long polls were sent "
                                     f"after {timeout} s")
            self.raise_failures()
            await asyncio.sleep(0.02)
        await until_in_line(self.base, self.server_pid, count, deadline,
                            self.raise_failures)
        self.intake = time.monotonic() - started

    async def _wait_for_one(self) -> None:
        connection = HttpConnection(self.base, self.token)
        await connection.open()
        try:
            await connection.send_post(f"queues/{self.queue}/receive", {"wait": WAIT})
            self.requested += 1
            status, body = await connection.read_answer()
            arrived = time.monotonic()
            assert status == 200, body
            for message in body["messages"]:
                self.delivered[message["payload"]] = arrived
                status, body = await connection.post(f"queues/{self.queue}/ack",
                                                     {"receipts": [message["receipt"]]})
                assert status == 200, body
        finally:
            connection.close()

    def raise_failures(self) -> None:
        """A waiter's error (a status other than 200, a closed connection), if one ended so."""
        for waiter in self.waiters:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is not None:
                raise waiter.exception()  # type: ignore[misc]

    async def send_one_by_one(self, count: int, timeout: float = 30) -> list[float]:
        """Send ``count`` messages (payloads 0 to count - 1), SEND_EVERY apart, from a
        thread of this process; each one's delivery latency in ms, in the order sent.
        Raises AssertionError naming those no waiter got within ``timeout`` seconds.
        Each waiter takes one message, so there must be ``count`` of them at least."""
        first = len(self.sent)
        if len(self.waiters) - first < count:
            raise ValueError(f"{count} sends need as many waiters; {len(self.waiters)} "
                             f"were opened and {first} have had one")
        await asyncio.to_thread(self._send, first, count)
        deadline = time.monotonic() + timeout
        wanted = range(first, first + count)
        while any(i not in self.delivered for i in wanted):
            if time.monotonic() > deadline:
                missing = [i for i in wanted if i not in self.delivered]
                raise AssertionError(f"{len(missing)} of {count} messages reached no waiter "
                                     f"within {timeout} s: {missing[:10]}")
            self.raise_failures()
            await asyncio.sleep(0.01)
        return [(self.delivered[i] - self.sent[i]) * 1000 for i in wanted]

    def _send(self, first: int, count: int) -> None:
        from django.db import connections

        import djqueue
        from djqueue.api.worker_wakeups import wake_addresses
        from djqueue.models import ProcessKind, Worker

        try:
            deadline = time.monotonic() + 30
            while not any(self.queue in row.queues for row in Worker.objects.filter(
                    kind=ProcessKind.HTTP)):
                if time.monotonic() > deadline:
                    raise AssertionError("the API server did not list the queue it waits on")
                time.sleep(0.02)
            wake_addresses.forget()  # read the server's address afresh
            for i in range(first, first + count):
                djqueue.send(self.queue, i)
                self.sent[i] = time.monotonic()
                time.sleep(SEND_EVERY)
        finally:
            connections.close_all()  # this thread's

    async def close(self) -> None:
        for waiter in self.waiters:
            waiter.cancel()
        await asyncio.gather(*self.waiters, return_exceptions=True)


def percentiles(latencies: list[float]) -> dict[str, float]:
    """p50, p95 and max of ``latencies``, in their unit."""
    ordered = sorted(latencies)
    return {"p50": ordered[len(ordered) // 2],
            "p95": ordered[max(0, int(0.95 * len(ordered)) - 1)], "max": ordered[-1]}
