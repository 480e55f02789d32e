"""The long-poll row of bench/databases.py: how soon a message sent reaches one of a
thousand receives waiting on one API server process (issue #27: p95 ≤ 50 ms).

A ``manage.py djqueue_http`` process on a loopback port, at djqueue's settings (it
polls every POLL_MAX, 0.5 s, so a delivery much faster than that came by its send's
wake-up); the waiters and the sends run in this process, as in
tests/http/test_long_polls.py, which checks the same run's threads and connections
and that each send wakes a waiter (tests/http/long_poll_runs.py, shared).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from common import ROOT

QUEUE = "bench.poll"


def long_poll_latencies(waiters: int, sent: int) -> dict[str, float]:
    """``waiters`` long polls, then ``sent`` messages one by one (no more than
    ``waiters``): their delivery p50, p95 and max, in ms, and the seconds the server
    took to take the long polls in (each claims once on arrival; the sends begin
    once the server is idle again)."""
    import httpx

    import djqueue
    from djqueue.http import access
    from djqueue.models import ApiClient, ApiPermission, Worker
    from tests.http.long_poll_runs import LongPolls, percentiles
    from tests.servers import free_port

    djqueue.create_queue(QUEUE, exist_ok=True)
    ApiClient.objects.filter(name="bench.poll").delete()
    client = ApiClient.objects.create(name="bench.poll")
    access.grant(client, QUEUE, ApiPermission.FULL_CONTROL)
    token = access.issue_token(client)
    port = free_port()
    server = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "djqueue_http",
                               "--port", str(port)], cwd=ROOT, env={**os.environ})
    base = f"http://127.0.0.1:{port}/queue-api/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "openapi.json", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.05)

        async def run() -> tuple[list[float], float]:
            polls = LongPolls(base, token, QUEUE, server.pid)
            await polls.warm()
            try:
                await polls.open(waiters)
                return await polls.send_one_by_one(sent), polls.intake
            finally:
                await polls.close()

        latencies, intake = asyncio.run(run())
        found = percentiles(latencies)
    finally:
        server.terminate()
        server.wait(30)
        Worker.objects.all().delete()  # the server's row, gone at its exit
        djqueue.purge(QUEUE)
    return {**{f"long_poll_{key}_ms": value for key, value in found.items()},
            "long_poll_intake_s": intake}
