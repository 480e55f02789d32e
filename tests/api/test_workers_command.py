"""``manage.py djqueue_workers``: the worker processes serving queues, from their
heartbeat rows, with what each holds; a killed one shows as late, then is gone once
the reaper has judged it dead. Real worker processes, real signals."""

from __future__ import annotations

import json
import signal
from io import StringIO

import pytest
from django.core.management import call_command

import djqueue
from djqueue.maintenance.reaper import Reaper
from tests.conftest import wait_until
from tests.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def listed(*args: str) -> str:
    out = StringIO()
    call_command("djqueue_workers", *args, stdout=out)
    return out.getvalue()


def test_the_workers_with_what_they_hold_and_a_killed_one_late_then_gone(spawn):
    assert listed() == "No worker is registered.\n"
    djqueue.create_queue("t.slow", visibility_timeout=300)
    djqueue.create_queue("t.record")
    djqueue.send_batch("t.slow", [{"n": i, "sleep": 600} for i in range(1, 3)])
    busy = spawn("djqueue_worker", "t.slow", "-c", "2", "-b", "2")
    idle = spawn("djqueue_worker", "t.record", "t.slow", "-c", "3", "-b", "1")

    def rows() -> list[dict]:
        return json.loads(listed("--json"))

    # Both started handlers (their start effects), and a beat reported what is held.
    wait_until(lambda: Effect.objects.count() == 2 and len(rows()) == 2
               and sum(r["holding"] for r in rows()) == 2, 60, "two held messages reported")
    by_pid = {r["pid"]: r for r in rows()}
    assert set(by_pid) == {busy.pid, idle.pid}
    holders = {pid for pid, r in by_pid.items() if r["holding"]}
    held = sorted(i for r in by_pid.values() for i in r["held_ids"])
    assert held == sorted(djqueue.peek("t.slow", limit=10)[i].pk for i in range(2))
    assert by_pid[idle.pid]["queues"] == ["t.record", "t.slow"]
    assert (by_pid[busy.pid]["concurrency"], by_pid[idle.pid]["concurrency"]) == (2, 3)
    assert all(r["databases"] == ["default"] and not r["late"] for r in rows())
    assert all(0 <= r["heartbeat_age"] < 5 and 0 <= r["up"] < 120 for r in rows())
    table = listed().splitlines()
    assert all(r["kind"] == "worker" for r in rows())
    assert table[0].split() == ["WORKER", "KIND", "QUEUES", "THREADS", "HOLDING", "HEARTBEAT", "UP",
                                "CLOCK", "DATABASES"]
    assert len(table) == 3 and any("t.record,t.slow" in line for line in table)

    victim = busy if busy.pid in holders else idle
    victim.signal(signal.SIGKILL)
    victim.popen.wait(10)
    # Silent past WORKER_TIMEOUT (5 s in the tests): marked late until the reaper acts.
    wait_until(lambda: any(r["late"] for r in rows()), 30, "the killed worker marked late")
    assert "(late)" in listed()
    Reaper().tick()
    [survivor] = rows()
    assert survivor["pid"] != victim.pid and not survivor["late"]
