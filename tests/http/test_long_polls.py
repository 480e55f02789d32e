"""A thousand long polls on one server process: they hold no thread and no database
connection while they wait, and each message sent wakes one of them. How soon is
measured by the long-poll row of bench/databases.py."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.utils import timezone

import djqueue
from djqueue.api import receiving
from djqueue.api.receiving import queues_to_claim_from
from djqueue.api.worker_wakeups import wake_addresses
from djqueue.models import Message, ProcessKind, QueueLimiter, State, Worker
from tests.conftest import in_test_thread, run_async, wait_until
from tests.http.conftest import start_api_server
from tests.http.long_poll_runs import (
    HttpConnection,
    LongPolls,
    open_long_poll,
    percentiles,
    until_in_line,
)

pytestmark = pytest.mark.django_db(transaction=True)
WAITERS = int(os.environ.get("DJQ_WAITERS", "1000"))
SENT = 50


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def database_connections_of(pid: int) -> int:
    """Sockets of ``pid`` connected to the database server's port (an SQLite database:
    open descriptors of its file)."""
    settings = connection.settings_dict
    fds = Path(f"/proc/{pid}/fd")
    targets = []
    for fd in fds.iterdir():
        try:
            targets.append(os.readlink(fd))
        except OSError:
            continue
    if connection.vendor == "sqlite":
        name = str(settings["NAME"])
        return sum(1 for t in targets if t == name or t.startswith(name + "-"))
    inodes = {t[8:-1] for t in targets if t.startswith("socket:[")}
    port = f"{int(settings['PORT'] or {'mysql': 3306, 'postgresql': 5432}[connection.vendor]):04X}"
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[2].endswith(":" + port) and fields[9] in inodes:
                count += 1
    return count


@pytest.mark.slow
def test_a_thousand_waiting_receivers_hold_no_threads_and_each_send_wakes_one(
        spawn, make_token):
    # The server polls its queues once a minute: within the waiters' 20 s, a message
    # reaches one of them only through its send's wake-up.
    server = start_api_server(spawn, env={"DJQUEUE_TEST_POLL": "60"})
    djqueue.create_queue("h.poll")
    token = make_token({"h.poll": "full_control"})

    async def scenario() -> tuple[tuple[int, int], dict[str, list[int]], list[float]]:
        polls = LongPolls(server.base, token, "h.poll", server.pid)
        await polls.warm()
        baseline = (threads_of(server.pid), database_connections_of(server.pid))
        try:
            await polls.open(WAITERS)
            samples: dict[str, list[int]] = {"threads": [], "connections": []}
            for _ in range(6):  # over 1.5 s of waiting
                samples["threads"].append(threads_of(server.pid))
                samples["connections"].append(database_connections_of(server.pid))
                await asyncio.sleep(0.25)
            polls.raise_failures()
            # Fails, naming them, if any message reached no waiter within 30 s.
            latencies = await polls.send_one_by_one(SENT)
        finally:
            await polls.close()
        return baseline, samples, latencies

    (threads_base, connections_base), samples, latencies = run_async(scenario())
    found = percentiles(latencies)
    # The delivery's speed is the bench's to judge (bench/databases.py, p95 ≤ 50 ms).
    print(f"{WAITERS} waiting: threads {samples['threads']} (warm: {threads_base}), "
          f"database connections {samples['connections']} (warm: {connections_base}); "
          f"delivery p50 {found['p50']:.1f} ms, p95 {found['p95']:.1f} ms, "
          f"max {found['max']:.1f} ms")
    assert max(samples["threads"]) <= threads_base
    assert max(samples["connections"]) <= connections_base


def test_the_api_server_drops_a_wake_up_not_signed_with_the_projects_key(
        api_server, make_token):
    djqueue.create_queue("h.forged")
    token = make_token({"h.forged": "full_control"})
    with api_server.client(token) as http:  # a first long poll registers the server
        assert http.post("queues/h.forged/receive", json={"wait": 0.1}).status_code == 200
    row = wait_until(lambda: Worker.objects.filter(kind=ProcessKind.HTTP)
                     .exclude(wake_address="").first(), 30, "the server's wake address")
    host, port = row.wake_address.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:
        forger.sendto(b"default", (host, int(port)))  # what a send signed nothing with
    wait_until(lambda: f"Dropped 1 wake-up datagram(s) on {row.wake_address} not signed"
               in api_server.output(), 30, "the server to say it dropped the datagram")
    # (The signed wake-ups of sends still end long polls: the test above.)


def test_a_waiter_whose_condition_matches_nothing_does_not_keep_a_message_from_another(
        spawn, make_token):
    # Polling off, as above: a message reaches a waiter only through its send's wake-up.
    server = start_api_server(spawn, env={"DJQUEUE_TEST_POLL": "60"})
    djqueue.create_queue("h.where")
    token = make_token({"h.where": "full_control"})
    receive = "queues/h.where/receive"

    async def scenario() -> tuple[dict, dict]:
        # The picky one waits first and longer; the plain one arrives behind it.
        picky = await open_long_poll(server.base, token, receive,
                                     {"wait": 20, "where": "priority >= 9"})
        plain = None
        try:
            await in_test_thread(wait_until, lambda: any(
                "h.where" in row.queues for row in Worker.objects.filter(
                    kind=ProcessKind.HTTP)), 30, "the server to list the queue")
            plain = await open_long_poll(server.base, token, receive, {"wait": 10})
            await until_in_line(server.base, server.pid, 2, time.monotonic() + 30)

            def send(n: int, priority: int = 0) -> None:
                wake_addresses.forget()
                djqueue.send("h.where", {"n": n}, priority=priority)

            await in_test_thread(send, 1)
            _, plain_got = await plain.read_answer()
            await in_test_thread(send, -1, 9)  # the picky one still waits, and gets its own
            _, picky_got = await picky.read_answer()
            return plain_got, picky_got
        finally:
            picky.close()
            if plain is not None:
                plain.close()

    plain_got, picky_got = run_async(scenario())
    # Before lines were kept by condition, the plain waiter stood behind the picky one,
    # whose claims found nothing: it got its message only once the picky one left, after
    # its own wait had ended, so it answered empty.
    assert [m["payload"] for m in plain_got["messages"]] == [{"n": 1}]
    assert [m["payload"] for m in picky_got["messages"]] == [{"n": -1}]


def test_one_callers_long_polls_wait_with_at_most_eight_conditions(spawn, make_token):
    # Polling off: eleven lines polling twice a second would keep the server from ever
    # looking idle (all_in), and each message here reaches its waiter by its wake-up.
    api_server = start_api_server(spawn, env={"DJQUEUE_TEST_POLL": "60"})
    djqueue.create_queue("h.conditions")
    token = make_token({"h.conditions": "full_control"})
    other = make_token({"h.conditions": "receive"})
    receive = "queues/h.conditions/receive"

    async def waiting(body: dict, as_token: str = token) -> HttpConnection:
        return await open_long_poll(api_server.base, as_token, receive, {"wait": 20, **body})

    async def all_in(count: int) -> None:
        await until_in_line(api_server.base, api_server.pid, count, time.monotonic() + 30)

    async def answer(connection: HttpConnection) -> tuple[int, dict]:
        return await asyncio.wait_for(connection.read_answer(), 30)

    def send(priority: int, count: int = 1) -> None:
        wake_addresses.forget()  # read the server's address afresh
        for _ in range(count):
            djqueue.send("h.conditions", {"p": priority}, priority=priority)

    async def scenario() -> dict[str, object]:
        found: dict[str, object] = {}
        eight = [await waiting({"where": f"priority = {p}"}) for p in range(1, 9)]
        again = await waiting({"where": "priority = 1"})  # a condition it waits with
        plain = await waiting({})
        elsewhere = await waiting({"where": "priority = 9"}, other)  # another caller
        await all_in(11)
        ninth = await waiting({"where": "priority = 9"})
        found["ninth"] = await answer(ninth)
        await in_test_thread(send, 0)
        found["plain"] = await answer(plain)
        await in_test_thread(send, 1, 2)
        found["both ones"] = [await answer(eight[0]), await answer(again)]
        await in_test_thread(send, 9)  # the other caller's
        found["elsewhere"] = await answer(elsewhere)
        # The caller's "priority = 1" line is gone: a ninth condition may wait now.
        later = await waiting({"where": "priority = 9"})
        await all_in(8)
        await in_test_thread(send, 9)
        found["later"] = await answer(later)
        for each in [*eight, again, plain, elsewhere, ninth, later]:
            each.close()
        return found

    found = run_async(scenario())
    status, body = found["ninth"]
    assert status == 429 and body["type"] == "urn:djqueue:error:TooManyConditions", body
    assert "already waits with 8 different conditions" in body["detail"]
    assert "HTTP_MAX_WAIT_CONDITIONS = 8" in body["detail"]

    def payloads(answered: tuple[int, dict]) -> list:
        status, body = answered
        assert status == 200, body
        return [m["payload"] for m in body["messages"]]

    assert payloads(found["plain"]) == [{"p": 0}]
    assert [payloads(a) for a in found["both ones"]] == [[{"p": 1}], [{"p": 1}]]
    assert payloads(found["elsewhere"]) == [{"p": 9}]
    assert payloads(found["later"]) == [{"p": 9}]


def test_a_send_wakes_only_the_long_polls_waiting_on_its_queue(spawn, make_token):
    # Polling off: only wake-ups make the server claim. The other queue holds a message
    # back from every claim (a concurrency limit of 0), and counts each: that shows
    # whether its line was woken by the sends to the first.
    server = start_api_server(spawn, env={"DJQUEUE_TEST_POLL": "60"})
    djqueue.create_queue("h.sent")
    djqueue.create_queue("h.quiet", concurrency_limit=0)
    djqueue.send("h.quiet", "held back")
    token = make_token({"h.*": "full_control"})
    limiter = QueueLimiter.objects.filter(queue__name="h.quiet")

    def listed(*names: str) -> bool:
        return any(set(names) <= set(row.queues)
                   for row in Worker.objects.filter(kind=ProcessKind.HTTP))

    async def waiting(queue: str) -> HttpConnection:
        return await open_long_poll(server.base, token, f"queues/{queue}/receive",
                                    {"wait": 20})

    async def scenario() -> tuple[int, int, list[tuple[int, dict]]]:
        quiet = await waiting("h.quiet")
        await in_test_thread(wait_until, lambda: listed("h.quiet") and (
            limiter.get().held_back >= 1), 30, "the quiet queue's waiter in line")
        waiters = [await waiting("h.sent") for _ in range(5)]
        await in_test_thread(wait_until, lambda: listed("h.quiet", "h.sent"), 30,
                                "the server to list both queues")
        await until_in_line(server.base, server.pid, 6, time.monotonic() + 30)
        before = await in_test_thread(lambda: limiter.get().held_back)

        def send() -> None:
            wake_addresses.forget()
            for n in range(5):
                djqueue.send("h.sent", n)

        await in_test_thread(send)
        answers = [await asyncio.wait_for(w.read_answer(), 30) for w in waiters]
        after = await in_test_thread(lambda: limiter.get().held_back)
        for each in [quiet, *waiters]:
            each.close()
        return before, after, answers

    before, after, answers = run_async(scenario())
    assert sorted(m["payload"] for _, body in answers for m in body["messages"]) == [
        0, 1, 2, 3, 4]
    assert after == before  # the quiet queue's line claimed no more


def test_a_message_given_back_without_a_delay_reaches_a_long_poll_at_once(spawn, make_token):
    # Polling off: the long poll gets the message only if its release wakes the line.
    server = start_api_server(spawn, env={"DJQUEUE_TEST_POLL": "60"})
    djqueue.create_queue("h.given")
    djqueue.send("h.given", {"n": 1})
    token = make_token({"h.given": "full_control"})

    async def scenario() -> tuple[dict, tuple[int, dict]]:
        holder = HttpConnection(server.base, token)
        await holder.open()
        status, held = await holder.post("queues/h.given/receive", {"visibility_timeout": 600})
        assert status == 200 and len(held["messages"]) == 1, held
        waiter = await open_long_poll(server.base, token, "queues/h.given/receive",
                                      {"wait": 20})
        try:
            await in_test_thread(wait_until, lambda: any(
                "h.given" in row.queues for row in Worker.objects.filter(
                    kind=ProcessKind.HTTP)), 30, "the server to list the queue")
            await until_in_line(server.base, server.pid, 2, time.monotonic() + 30)
            status, nacked = await holder.post(
                "queues/h.given/nack", {"receipts": [held["messages"][0]["receipt"]]})
            assert status == 200, nacked
            return held, await asyncio.wait_for(waiter.read_answer(), 30)
        finally:
            holder.close()
            waiter.close()

    held, (status, got) = run_async(scenario())
    assert status == 200, got
    # Before releases woke receivers, the line slept through its 20 s and answered empty.
    assert [m["id"] for m in got["messages"]] == [held["messages"][0]["id"]]


def test_a_message_no_wake_up_announced_reaches_a_long_poll_by_its_poll(api_server, make_token):
    # The sender's wake-ups are off: only the server's poll (every POLL_MAX, 0.1 s in the
    # tests) can find the message, and that poll reads before it claims.
    djqueue.create_queue("h.unannounced")
    token = make_token({"h.unannounced": "full_control"})

    async def scenario() -> tuple[int, dict]:
        waiter = await open_long_poll(api_server.base, token, "queues/h.unannounced/receive",
                                      {"wait": 20})
        try:
            await until_in_line(api_server.base, api_server.pid, 1, time.monotonic() + 30)

            def send() -> None:
                with override_settings(DJQUEUE={**settings.DJQUEUE, "WAKE_HOST": None}):
                    djqueue.send("h.unannounced", {"n": 1})

            await in_test_thread(send)
            return await asyncio.wait_for(waiter.read_answer(), 30)
        finally:
            waiter.close()

    status, got = run_async(scenario())
    assert status == 200, got
    assert [m["payload"] for m in got["messages"]] == [{"n": 1}]



def test_the_servers_poll_reads_which_queues_have_a_message_to_claim():
    """What the API server's poll reads once for all its lines without a condition
    (djqueue.api.receiving.queues_to_claim_from): only those lines claim."""
    for name in ("h.ready", "h.empty", "h.due", "h.later", "h.paused", "h.claimed"):
        djqueue.create_queue(name)
    djqueue.send("h.ready", 1)
    due = djqueue.send("h.due", 1, delay=3600)
    Message.objects.filter(pk=due.pk).update(visible_at=timezone.now() - timedelta(seconds=1))
    djqueue.send("h.later", 1, delay=3600)
    djqueue.send("h.paused", 1)
    djqueue.pause("h.paused")
    djqueue.send("h.claimed", 1)
    assert djqueue.receive("h.claimed")
    asked = ["h.ready", "h.empty", "h.due", "h.later", "h.paused", "h.claimed", "h.nowhere"]
    receiving._promotion.last.clear()  # promotion is due: the due message is promoted
    # A queue that does not exist is counted in: the claim then says why.
    assert queues_to_claim_from(asked) == {"h.ready", "h.due", "h.nowhere"}
    assert Message.objects.get(pk=due.pk).state == State.READY
    assert queues_to_claim_from([]) == set()
