"""The HTTP API against the Python API, in the same run (``make bench``).

A server process (``manage.py djqueue_http``, uvicorn) on a loopback port; one
keep-alive client in this process. Two rows, each with the Python API's rate
measured right before it, the server's and the client's CPU per request, which say
where the time goes (the rest is waiting: the loopback and the database's round
trips, two a send: the token's row and the insert's commit):

- ``http_send_1``: one send per request (and per commit), against ``djqueue.send``;
- ``http_batch_100``: receive 100 and ack them by receipt, two requests a batch,
  against ``receive(max_messages=100)`` + ``ack_many``.
"""

from __future__ import annotations

import time

from common import api_server
from measures import PAYLOAD, clear, fill, rate

from tests.servers import cpu_seconds

SENDS = 2000
DRAIN = 10_000


def http_api(sends: int = SENDS, drain: int = DRAIN) -> dict[str, float]:
    """``sends`` sends one per request, then ``drain`` messages received and acked by 100."""
    import httpx

    import djqueue

    clear()
    djqueue.create_queue("bench.http", exist_ok=True)
    results: dict[str, float] = {}
    with api_server("bench.http") as (server, base, token), httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        for _ in range(200):  # warm: threads, connections, caches
            http.post("queues/bench.http/messages", json={"payload": PAYLOAD})

        started = time.perf_counter()
        for _ in range(sends):
            djqueue.send("bench.http", PAYLOAD)
        results["api_send_1_same_run"] = rate(sends, time.perf_counter() - started)
        cpu, mine = cpu_seconds(server.pid), time.process_time()
        started = time.perf_counter()
        for _ in range(sends):
            response = http.post("queues/bench.http/messages", json={"payload": PAYLOAD})
            assert response.status_code == 201, response.text
        results["http_send_1"] = rate(sends, time.perf_counter() - started)
        results["http_send_1_server_cpu_us"] = (cpu_seconds(server.pid) - cpu) / sends * 1e6
        results["http_send_1_client_cpu_us"] = (time.process_time() - mine) / sends * 1e6

        clear()
        fill(drain, "bench.http")
        started = time.perf_counter()
        drained = 0
        while messages := djqueue.receive("bench.http", max_messages=100):
            drained += len(djqueue.ack_many(messages))
        results["api_batch_100_same_run"] = rate(drained, time.perf_counter() - started)
        fill(drain, "bench.http")
        cpu = cpu_seconds(server.pid)
        started = time.perf_counter()
        drained = 0
        while True:
            got = http.post("queues/bench.http/receive", json={"max_messages": 100})
            messages = got.json()["messages"]
            if not messages:
                break
            done = http.post("queues/bench.http/ack",
                             json={"receipts": [m["receipt"] for m in messages]})
            drained += len(done.json()["done"])
        results["http_batch_100"] = rate(drained, time.perf_counter() - started)
        results["http_batch_100_server_cpu_us"] = (
            (cpu_seconds(server.pid) - cpu) / drained * 1e6)
    results["http_send_1_vs_api"] = results["http_send_1"] / results["api_send_1_same_run"]
    results["http_batch_100_vs_api"] = (results["http_batch_100"]
                                        / results["api_batch_100_same_run"])
    return results
