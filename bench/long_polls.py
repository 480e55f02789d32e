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

from common import api_server

QUEUE = "bench.poll"


def long_poll_latencies(waiters: int, sent: int) -> dict[str, float]:
    """``waiters`` long polls, then ``sent`` messages one by one (no more than
    ``waiters``): their delivery p50, p95 and max, in ms, and the seconds the server
    took to take the long polls in (each claims once on arrival; the sends begin
    once the server is idle again)."""
    import djqueue
    from djqueue.models import Worker
    from tests.http.long_poll_runs import LongPolls, percentiles

    djqueue.create_queue(QUEUE, exist_ok=True)

    async def run(base: str, token: str, pid: int) -> tuple[list[float], float]:
        polls = LongPolls(base, token, QUEUE, pid)
        await polls.warm()
        try:
            await polls.open(waiters)
            return await polls.send_one_by_one(sent), polls.intake
        finally:
            await polls.close()

    try:
        with api_server(QUEUE) as (server, base, token):
            latencies, intake = asyncio.run(run(base, token, server.pid))
    finally:
        Worker.objects.all().delete()  # the server's row, gone at its exit
        djqueue.purge(QUEUE)
    found = percentiles(latencies)
    return {**{f"long_poll_{key}_ms": value for key, value in found.items()},
            "long_poll_intake_s": intake}
