"""How the HTTP API server starts hearing of messages for its long polls, the first time
one waits: its row in ``djqueue_worker`` (how senders find it) and its wake-up socket.
Neither failing must leave the server deaf for the rest of its life."""

from __future__ import annotations

import asyncio
import time

import pytest

import djqueue
from djqueue.api.worker_wakeups import wake_addresses
from djqueue.models import ProcessKind, Worker
from tests.conftest import in_test_thread, run_async, wait_until
from tests.http.conftest import start_api_server
from tests.http.long_poll_runs import open_long_poll, until_in_line
from tests.refused_rows import RefusedRows

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_api_server_whose_row_was_refused_is_registered_by_its_heartbeat(spawn, make_token):
    # Polling off: the long poll gets the message only by the sender's wake-up, and a
    # sender finds the server only by its row. The database refuses that row when the
    # first long poll needs it. Before, that long poll failed (500) and the server
    # started neither its poll nor its heartbeat: later long polls slept their whole
    # wait, whatever was sent, until the process was restarted.
    server = start_api_server(spawn, env={"DJQUEUE_TEST_POLL": "60"})
    djqueue.create_queue("h.late")
    token = make_token({"h.late": "full_control"})
    rows = Worker.objects.filter(kind=ProcessKind.HTTP)
    refused = RefusedRows(Worker._meta.db_table)
    refused.on()

    def registered() -> None:
        wait_until(lambda: any("h.late" in row.queues for row in rows.all()), 30,
                   "its heartbeat to register it")

    async def scenario() -> tuple[int, dict]:
        waiter = await open_long_poll(server.base, token, "queues/h.late/receive",
                                      {"wait": 20})
        try:
            await until_in_line(server.base, server.pid, 1, time.monotonic() + 30)
            assert not await in_test_thread(rows.exists)  # its registration failed
            await in_test_thread(refused.off)
            await in_test_thread(registered)

            def send() -> None:
                wake_addresses.forget()
                djqueue.send("h.late", {"n": 1})

            await in_test_thread(send)
            return await asyncio.wait_for(waiter.read_answer(), 30)
        finally:
            waiter.close()

    try:
        status, got = run_async(scenario())
    finally:
        refused.off()
    assert status == 200, got
    assert [m["payload"] for m in got["messages"]] == [{"n": 1}]
    assert "Could not register http:" in server.output()


def test_an_api_server_that_cannot_bind_its_wake_up_socket_finds_messages_by_its_poll(
        spawn, make_token):
    # WAKE_HOST is an address this host does not have (TEST-NET-1). Before, the first
    # long poll failed (500) and the server started neither its poll nor its heartbeat:
    # every later long poll slept its whole wait, whatever was sent.
    server = start_api_server(spawn, env={"DJQUEUE_TEST_WAKE_HOST": "192.0.2.1"})
    djqueue.create_queue("h.polled")
    token = make_token({"h.polled": "full_control"})

    async def scenario() -> list[tuple[int, dict]]:
        answers = []
        for n in range(2):
            waiter = await open_long_poll(server.base, token, "queues/h.polled/receive",
                                          {"wait": 20})
            try:
                await until_in_line(server.base, server.pid, 1, time.monotonic() + 30)
                await in_test_thread(lambda n=n: djqueue.send("h.polled", {"n": n}))
                answers.append(await asyncio.wait_for(waiter.read_answer(), 30))
            finally:
                waiter.close()
        return answers

    answers = run_async(scenario())
    assert [(status, [m["payload"] for m in got.get("messages", [])]) for status, got in answers] == [
        (200, [{"n": 0}]), (200, [{"n": 1}])], answers
    assert "cannot take wake-ups on WAKE_HOST '192.0.2.1'" in server.output()
    assert Worker.objects.filter(kind=ProcessKind.HTTP, wake_address="").exists()
