"""Senders wake idle workers of other processes by a datagram (djqueue.api.worker_wakeups)."""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

import djqueue
from djqueue.api import queue_operations, worker_wakeups
from djqueue.api.worker_wakeups import WakeSocket
from djqueue.maintenance.reaper import Reaper
from djqueue.models import History, Message, State, Worker
from djqueue.polling import local_wakeup
from djqueue.storage.requeueing import return_claims
from djqueue.storage.transitions import fail
from djqueue.worker.message_worker import Worker as QueueWorker
from djqueue.worker.options import WorkerOptions
from tests.conftest import Process, wait_until
from tests.servers import until_idle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_directory():
    worker_wakeups.wake_addresses.forget()
    yield
    worker_wakeups.wake_addresses.forget()


@pytest.fixture
def heard():
    """The databases named by the datagrams a listener serving ``t.record`` hears (its
    worker row written, the senders' address cache emptied)."""
    named: list[str] = []
    wake_socket = WakeSocket("127.0.0.1", named=named.append)
    stop = threading.Event()
    listener = threading.Thread(target=wake_socket.listen_until, args=(stop,))
    listener.start()
    try:
        Worker.objects.create(id="w1", hostname="h", pid=1, lock_key="k", queues=["t.record"],
                              wake_address=wake_socket.address)
        worker_wakeups.wake_addresses.forget()
        yield named
    finally:
        stop.set()
        listener.join(5)
        wake_socket.close()


def test_a_wake_up_reaches_the_workers_of_that_queue_only_naming_the_database(heard):
    seen = local_wakeup.generation
    worker_wakeups.wake_workers({"t.other"})
    assert not local_wakeup.wait(seen, 0.5), "a worker of another queue was woken"
    worker_wakeups.wake_workers({"t.record"})
    assert local_wakeup.wait(seen, 10), "the datagram did not wake the listener"
    assert heard == ["default"], "the datagram names the database the send went to"


def signed_with(secret: str, name: str) -> bytes:
    with override_settings(SECRET_KEY=secret):
        return worker_wakeups.wake_up_datagram(name)


def signed_text(body: bytes) -> bytes:
    """A datagram of ``body`` as it is, signed with the project's key."""
    return worker_wakeups._tag(settings.SECRET_KEY, body) + body


LONG = "q" * 100  # the longest queue name


@pytest.mark.parametrize(("data", "named"), [
    (lambda: worker_wakeups.wake_up_datagram("default"), ("default", None)),
    (lambda: worker_wakeups.wake_up_datagram("p2"), ("p2", None)),
    (lambda: worker_wakeups.wake_up_datagram("bäse"), ("bäse", None)),
    (lambda: worker_wakeups.wake_up_datagram("default", ["b", "a"]), ("default", {"a", "b"})),
    # Names that would not fit are left out: the datagram wakes everything.
    (lambda: worker_wakeups.wake_up_datagram("default", [f"{i:03}{LONG[3:]}" for i in range(12)]),
     ("default", None)),
    (lambda: b"default", None),  # unsigned, as a send of an earlier release
    (lambda: b"", None),
    (lambda: signed_with("another project's key", "default"), None),
    (lambda: worker_wakeups.wake_up_datagram("default")[:-1] + b"x", None),  # name changed
    (lambda: worker_wakeups.wake_up_datagram("default", ["q"])[:-1], None),  # cut short
    (lambda: b"x" * worker_wakeups.TAG_BYTES + b"default", None),
    (lambda: signed_with("the key before", "default"), ("default", None)),  # a fallback key
    (lambda: signed_with("k", "x" * (worker_wakeups.LONGEST_NAME + 1)), None),
    (lambda: signed_text(b"x" * (worker_wakeups.LONGEST_NAME + 1) + b"\nq"), None),
    (lambda: signed_text(b"default\n" + LONG.encode() * 12), None),  # longer than sent
    (lambda: signed_text(b"\nq"), None),  # no database
    (lambda: signed_text(b"default\n\xff"), None),  # not text
])
@override_settings(SECRET_KEY_FALLBACKS=["the key before"])
def test_a_datagram_signed_with_the_projects_key_names_a_database_and_queues(data, named):
    found = worker_wakeups.wake_up_read(data())
    expected = None if named is None else worker_wakeups.WakeUp(
        named[0], None if named[1] is None else frozenset(named[1]))
    assert found == expected


def test_a_flood_of_forged_datagrams_wakes_nothing_and_is_said_once(caplog):
    """Anyone who can reach the port could otherwise make a worker claim back to back;
    a sender with another SECRET_KEY is seen in the log, not silently slow."""
    woken: list[str] = []
    wake_socket = WakeSocket("127.0.0.1", named=woken.append)
    stop = threading.Event()
    listener = threading.Thread(target=wake_socket.listen_until, args=(stop,))
    listener.start()
    host, port = wake_socket.address.rsplit(":", 1)
    forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        seen = local_wakeup.generation
        forged = [b"default", b"", signed_with("another key", "default"), os.urandom(40)]
        for n in range(100):  # within the socket buffer: loopback drops none
            forger.sendto(forged[n % len(forged)], (host, int(port)))
        forger.sendto(worker_wakeups.wake_up_datagram("default"), (host, int(port)))
        assert local_wakeup.wait(seen, 10), "the signed datagram did not wake the listener"
        # Datagrams from one socket arrive in order: the forged ones were read first.
        assert woken == ["default"]
        assert wake_socket.checks.dropped == 99  # the first was said, the rest counted
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith(f"Dropped 1 wake-up datagram(s) on {wake_socket.address}"
                                      " not signed with this project's SECRET_KEY")
    finally:
        stop.set()
        listener.join(5)
        wake_socket.close()
        forger.close()


def test_a_wake_up_with_no_listener_or_an_unusable_address_is_harmless():
    Worker.objects.create(id="w1", hostname="h", pid=1, lock_key="k", queues=["t.record"],
                          wake_address="127.0.0.1:9")  # the discard port: nobody listens
    Worker.objects.create(id="w2", hostname="h", pid=2, lock_key="k2", queues=["t.record"],
                          wake_address="not-an-address")
    djqueue.create_queue("t.record")
    worker_wakeups.wake_workers({"t.record"})
    assert djqueue.send("t.record", {"n": 1}).pk  # a send wakes them too and still succeeds


def test_a_send_wakes_a_worker_that_polls_every_two_minutes(spawn):
    djqueue.create_queue("t.record")
    worker = spawn("djqueue_worker", "t.record", env={"DJQUEUE_TEST_POLL": "120"})
    wait_until(lambda: Worker.objects.exclude(wake_address="").exists(), 60, "the worker")
    djqueue.send("t.record", {"n": 1})
    wait_until(lambda: History.objects.count() == 1, 60, "the first message")
    # Now idle with a 120 s poll: only the wake-up can bring the next one in sooner. A
    # datagram not signed with the project's key is dropped, and said.
    address = Worker.objects.exclude(wake_address="").get().wake_address
    host, port = address.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:
        forger.sendto(b"default", (host, int(port)))
    wait_until(lambda: f"Dropped 1 wake-up datagram(s) on {address}" in worker.output(), 60,
               "the worker to say it dropped the forged datagram")
    sent = time.monotonic()
    djqueue.send("t.record", {"n": 2})
    wait_until(lambda: History.objects.count() == 2, 60, f"the wake-up\n{worker.output()}")
    assert time.monotonic() - sent < 60


def claimed_beside_an_idle_worker(spawn) -> tuple[Process, Message]:
    """A message of ``t.record`` claimed here (for 600 s), then a worker process of that
    queue polling every two minutes, started, given a first message and asleep: only a
    wake-up can bring it the claimed message, once it is ready again, within a minute."""
    djqueue.create_queue("t.record")
    djqueue.send("t.record", {"n": 2})
    [mine] = djqueue.receive("t.record", visibility_timeout=600)
    worker = spawn("djqueue_worker", "t.record", env={"DJQUEUE_TEST_POLL": "120"})
    wait_until(lambda: Worker.objects.exclude(wake_address="").exists(), 60, "the worker")
    worker_wakeups.wake_addresses.forget()  # read by the first send, before the worker was
    djqueue.send("t.record", {"n": 1})
    wait_until(lambda: History.objects.count() == 1, 60, "the first message")
    until_idle(worker.pid, time.monotonic() + 30)  # asleep until its next poll, 120 s on
    return worker, mine


def test_a_message_given_back_without_a_delay_wakes_a_worker_that_polls_every_two_minutes(
        spawn):
    worker, mine = claimed_beside_an_idle_worker(spawn)
    released = time.monotonic()
    mine.nack()
    wait_until(lambda: History.objects.filter(id=mine.pk).exists(), 60,
               f"the wake-up\n{worker.output()}")
    assert time.monotonic() - released < 60


def test_claims_the_reaper_returns_wake_a_worker_that_polls_every_two_minutes(spawn):
    worker, mine = claimed_beside_an_idle_worker(spawn)  # its lease then runs out
    Message.objects.filter(pk=mine.pk).update(visible_at=timezone.now() - timedelta(seconds=1))
    returned = time.monotonic()
    assert Reaper().tick().expired == 1
    wait_until(lambda: History.objects.filter(id=mine.pk).exists(), 60,
               f"the wake-up\n{worker.output()}")
    assert time.monotonic() - returned < 60


def test_a_failure_retried_at_once_wakes_a_worker_that_polls_every_two_minutes(spawn):
    worker, mine = claimed_beside_an_idle_worker(spawn)
    failed = time.monotonic()
    fail(mine, "try again at once", delay=0)
    wait_until(lambda: History.objects.filter(id=mine.pk).exists(), 60,
               f"the wake-up\n{worker.output()}")
    assert time.monotonic() - failed < 60


def test_a_failure_wakes_receivers_only_when_retried_at_once(heard):
    """A datagram for a failure retried at once, none for one retried later or one
    dead-lettered (heard in order: a datagram of the others would come first)."""
    djqueue.create_queue("t.record", exist_ok=True)
    with override_settings(DJQUEUE={**settings.DJQUEUE, "WAKE_HOST": None}):
        djqueue.send_batch("t.record", [1, 2, 3])  # no datagram of the sends
    later, dead, now = djqueue.receive("t.record", max_messages=3)
    fail(later, "boom", delay=30)
    fail(dead, "boom", dead_letter=True)
    fail(now, "boom", delay=0)
    wait_until(lambda: heard, 10, "the retry's datagram")
    assert heard == ["default"]


def test_claims_returned_together_wake_their_receivers_once(heard):
    """Returned in one transaction (as the reaper returns a dead worker's claims), three
    claims send one datagram, not one each (a datagram of a send after them is the next
    heard). The reaper itself would take the listener's row here for a dead worker's."""
    djqueue.create_queue("t.record", exist_ok=True)
    with override_settings(DJQUEUE={**settings.DJQUEUE, "WAKE_HOST": None}):
        djqueue.send_batch("t.record", [1, 2, 3])
    djqueue.receive("t.record", max_messages=3)
    assert return_claims(Message.objects.filter(state=State.CLAIMED), "gone", 500) == 3
    djqueue.send("t.record", 4)
    wait_until(lambda: len(heard) >= 2, 10, "the return's and the send's datagrams")
    assert heard == ["default", "default"]
    assert Message.objects.filter(state=State.READY).count() == 4


def test_a_release_with_a_delay_wakes_nobody(heard):
    """A datagram for a release without a delay (the message is ready at once), none for
    one with a delay (it is not)."""
    djqueue.create_queue("t.record", exist_ok=True)
    with override_settings(DJQUEUE={**settings.DJQUEUE, "WAKE_HOST": None}):
        djqueue.send_batch("t.record", [1, 2])  # no datagram of the sends
    later, now = djqueue.receive("t.record", max_messages=2)
    later.nack(delay=30)
    now.nack()
    # Datagrams from one socket on loopback arrive in order: had the delayed release
    # sent one, it would be heard first.
    wait_until(lambda: heard, 10, "the release's datagram")
    assert heard == ["default"]


def dead_then_redriven(message: Message) -> int:
    fail(message, "boom", dead_letter=True)
    return djqueue.redrive("t.record", to="t.record")


@pytest.mark.parametrize("made_ready", [
    pytest.param(lambda m: queue_operations.retry_now([m.pk]), id="retry_now"),
    pytest.param(lambda m: queue_operations.change_visibility([m.pk], 0), id="change_visibility"),
    pytest.param(dead_then_redriven, id="redrive"),
])
def test_a_message_made_ready_by_an_operation_wakes_its_receivers(heard, made_ready):
    djqueue.create_queue("t.record", exist_ok=True)
    with override_settings(DJQUEUE={**settings.DJQUEUE, "WAKE_HOST": None}):
        message = djqueue.send("t.record", 1, delay=3600)  # scheduled, and no datagram
    if made_ready is dead_then_redriven:
        message = Message.objects.get(pk=message.pk)
        Message.objects.filter(pk=message.pk).update(state=State.CLAIMED, lease_token="t")
        message.lease_token = "t"
    assert made_ready(message) == 1
    wait_until(lambda: heard, 10, "the datagram")
    assert heard == ["default"]


def test_workers_without_wake_ups_register_no_address(settings):
    settings.DJQUEUE = {**settings.DJQUEUE, "WAKE_HOST": None}
    djqueue.create_queue("t.record")

    worker = QueueWorker(WorkerOptions(queues=["t.record"], burst=True))
    assert worker.wake_socket is None and worker.registration.wake_address == ""


def test_a_worker_woken_by_a_send_claims_without_reading_first(settings, monkeypatch):
    """An idle worker's poll reads whether anything is ready before it opens a claim
    (cheap when nothing is); a worker that a send woke claims at once: the read was
    over a third of an idle worker's pickup (docs/performance.md)."""
    from django.db import connection

    from djqueue.storage import receiver_claims

    settings.DJQUEUE = {**settings.DJQUEUE, "POLL_MIN": 60.0, "POLL_MAX": 60.0}
    djqueue.create_queue("t.noop")
    reads: list[bool] = []
    read = receiver_claims._any_ready
    monkeypatch.setattr(receiver_claims, "_any_ready",
                        lambda *args: reads.append(read(*args)) or reads[-1])
    worker = QueueWorker(WorkerOptions(queues=["t.noop"]))
    sent = 5
    failures: list[BaseException] = []

    def send_one_at_a_time() -> None:
        try:
            for n in range(sent):
                djqueue.send("t.noop", {"n": n})
                wait_until(lambda n=n: History.objects.count() == n + 1, 60, f"message {n}")
        except BaseException as exc:
            failures.append(exc)
        finally:
            worker.stop_signals.request()  # as its SIGTERM does: the loop wakes and stops
            connection.close()

    sender = threading.Thread(target=send_one_at_a_time)
    sender.start()
    try:
        assert worker.run() == 0  # here, in the main thread (it installs signal handlers)
    finally:
        worker.stop_signals.request()
        sender.join(60)
    assert not failures, failures
    assert History.objects.count() == sent
    # Every message came in by a wake-up (the polls are a minute apart): no read at all.
    assert reads == []
