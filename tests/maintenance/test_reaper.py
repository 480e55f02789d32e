"""The reaper: expired leases come back counted; several reapers at once are safe."""

import logging
import re
import socket
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

import djqueue
from djqueue.maintenance.reaper import Reaper, ReapReport
from djqueue.models import Message, State, Worker
from tests.conftest import in_threads, wait_until, write_unreadable_time

pytestmark = pytest.mark.django_db(transaction=True)


def expire_all() -> None:
    Message.objects.filter(state=State.CLAIMED).update(
        visible_at=timezone.now() - timedelta(seconds=1))


def test_expired_lease_returns_counted_then_dead_letters():
    dlq = djqueue.create_queue("jobs.dead")
    djqueue.create_queue("jobs", max_attempts=2, dead_letter_queue=dlq)
    sent = djqueue.send("jobs", {"n": 1})
    [first] = djqueue.receive("jobs", visibility_timeout=60)
    expire_all()
    assert Reaper().tick().expired == 1
    row = Message.objects.get(pk=sent.pk)
    assert row.state == State.READY and row.attempts == 1
    assert "lease expired" in row.errors[0]["error"]
    with pytest.raises(djqueue.exceptions.NotOwner):
        first.ack()
    djqueue.receive("jobs")
    expire_all()
    Reaper().tick()
    row = Message.objects.get(pk=sent.pk)
    assert (row.state, row.queue_id, len(row.errors)) == (State.DEAD, dlq.pk, 2)


def test_stale_worker_is_reaped_and_its_claims_return(caplog):
    djqueue.create_queue("jobs")
    djqueue.send_batch("jobs", [{"n": i} for i in range(5)])
    Worker.objects.create(id="gone:1:abc", hostname="elsewhere", pid=1, lock_key="f" * 32,
                          heartbeat_at=timezone.now() - timedelta(hours=1))
    djqueue.receive("jobs", max_messages=5, owner="gone:1:abc", visibility_timeout=3600)
    caplog.set_level(logging.INFO, logger="djqueue.reaper")
    report = Reaper().tick()
    assert (report.dead_workers, report.returned_from_dead) == (1, 5)
    # The log line names what the pass did, and only that.
    [said] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Reaped")]
    assert said.startswith("Reaped: dead workers 1, returned from dead 5"), said
    assert " 0" not in said, said
    assert str(ReapReport()) == "nothing"
    # ... and the reason a worker is dead, with its heartbeat's age.
    assert re.search(r"Worker gone:1:abc on default is dead \(its last heartbeat 36\d\d\.\d s "
                     r"ago, past WORKER_TIMEOUT \(\d+ s\)\)", caplog.text), caplog.text
    assert Message.objects.filter(state=State.READY, attempts=1).count() == 5
    assert not Worker.objects.exists()


def test_worker_rows_of_absurd_values_are_dead_and_the_pass_goes_on():
    """No djqueue process writes a pid beyond pid_t (or text, which SQLite keeps) or a
    lock key that is not hex (a hand edit, a bug elsewhere). Such a row is taken for
    dead, with its claims returned; it must not raise out of the pass, which would end
    the reaper's process (a pid of text did, on SQLite: TypeError from os.kill)."""
    djqueue.create_queue("jobs")
    postgresql = connection.vendor == "postgresql"  # its column holds at most 2**31 - 1
    Worker.objects.create(id="absurd:pid", hostname=socket.gethostname()[:255],
                          pid=2**31 - 1 if postgresql else 2**32 - 1, lock_key="0" * 32)
    # On PostgreSQL the lock's key is read from the hex digits: this one has none. On
    # MariaDB/MySQL it names a free lock (dead after two heartbeat intervals), and SQLite
    # has no session locks (dead once silent for WORKER_TIMEOUT).
    Worker.objects.create(id="absurd:key", hostname="elsewhere", pid=1,
                          lock_key="not hex at all")
    owners = {"absurd:pid", "absurd:key"}
    if connection.vendor == "sqlite":  # the others refuse text in a number's column
        owners.add("absurd:pid text")
        Worker.objects.create(id="absurd:pid text", hostname=socket.gethostname()[:255],
                              pid=1, lock_key="1" * 32)
        with connection.cursor() as cursor:
            cursor.execute("UPDATE djqueue_worker SET pid = 'no pid' WHERE id = %s",
                           ["absurd:pid text"])
    djqueue.send_batch("jobs", [{"n": i} for i in range(len(owners))])
    for owner in sorted(owners):
        djqueue.receive("jobs", max_messages=1, owner=owner, visibility_timeout=3600)
    report = Reaper().tick()
    dead = owners if postgresql else owners - {"absurd:key"}
    assert (report.dead_workers, report.returned_from_dead) == (len(dead), len(dead))
    assert set(Worker.objects.values_list("pk", flat=True)) == owners - dead


def test_a_worker_row_whose_heartbeat_cannot_be_read_stops_no_part_of_a_pass():
    """A hand edit or another tool can leave a heartbeat time the driver cannot read.
    Reading the worker rows raised, so every pass over that database ended there: on
    PostgreSQL no dead worker's claims and no expired lease came back again (a
    DataError, logged each pass), and on SQLite and MariaDB the error ended the
    reaper's process. Now the other rows are still judged and the pass goes on; the
    unreadable row's worker is dead once its row has stayed unreadable for
    WORKER_TIMEOUT (a live worker's next heartbeat writes a time that reads)."""
    djqueue.create_queue("jobs")
    djqueue.send_batch("jobs", [{"n": i} for i in range(3)])
    Worker.objects.create(id="gone", hostname="elsewhere", pid=1, lock_key="e" * 32,
                          heartbeat_at=timezone.now() - timedelta(hours=1))
    Worker.objects.create(id="unreadable", hostname="elsewhere", pid=1, lock_key="d" * 32)
    for owner in ("gone", "unreadable", "leased"):
        djqueue.receive("jobs", max_messages=1, owner=owner, visibility_timeout=3600)
    expire_all_of("leased")
    write_unreadable_time("djqueue_worker", "heartbeat_at", "unreadable")
    reaper = Reaper()
    first = reaper.tick()
    assert (first.dead_workers, first.returned_from_dead, first.expired) == (1, 1, 1)
    assert Message.objects.filter(state=State.CLAIMED, owner="unreadable").count() == 1
    wait_until(lambda: reaper.tick().dead_workers == 1, 30,
               "the unreadable row's worker taken for dead after WORKER_TIMEOUT", interval=0.2)
    assert not Worker.objects.exists()
    assert Message.objects.filter(state=State.READY).count() == 3


def test_an_expired_claim_whose_row_cannot_be_read_is_dead_lettered_and_the_others_return():
    """A claimed message whose sent time a hand edit made unreadable: the reaper's return
    of expired leases read the queue's claims in one statement and failed at every pass
    (the pass over the queue failed; on PostgreSQL and SQLite here, on the old code, the
    row was still there, claimed and unreadable, after it), so the message stayed
    claimed for ever. It is dead-lettered with the reading's error now, the others
    return. (On MariaDB the ORM reads a zero date as nothing, and the claim that next
    reads the row sets it aside: tests/worker/test_unreadable_messages.py.)"""
    dead = djqueue.create_queue("jobs.dead")
    djqueue.create_queue("jobs", dead_letter_queue=dead)
    djqueue.send_batch("jobs", [{"n": i} for i in range(3)])
    held = djqueue.receive("jobs", max_messages=3, owner="leased")
    expire_all_of("leased")
    write_unreadable_time("djqueue_message", "sent_at", held[1].pk)
    report = Reaper().tick()
    unreadable = Message.objects.get(pk=held[1].pk)
    if connection.vendor == "mysql":
        assert report.expired == 3 and unreadable.state == State.READY
        return
    assert report.expired == 2
    assert (unreadable.state, unreadable.queue_id) == (State.DEAD, dead.pk)
    assert "its row could not be read (" in unreadable.errors[-1]["error"]
    assert Message.objects.filter(state=State.READY).count() == 2


def expire_all_of(owner: str) -> None:
    Message.objects.filter(state=State.CLAIMED, owner=owner).update(
        visible_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.row_locks
def test_dead_workers_claims_still_locked_are_returned_by_a_later_pass():
    """A killed worker's last transaction may still lock some of its rows for a moment
    (the server has not rolled it back yet). The reaper skips those rows, keeps the
    worker's row, and returns them on the next pass, not at their lease's expiry."""
    djqueue.create_queue("jobs")
    djqueue.send_batch("jobs", [{"n": i} for i in range(3)])
    Worker.objects.create(id="gone:1:abc", hostname="elsewhere", pid=1, lock_key="f" * 32,
                          heartbeat_at=timezone.now() - timedelta(hours=1))
    held = djqueue.receive("jobs", max_messages=3, owner="gone:1:abc", visibility_timeout=3600)
    locked, release = threading.Event(), threading.Event()

    def dying_transaction(_: int) -> None:
        with transaction.atomic():
            Message.objects.select_for_update().filter(pk=held[0].pk).get()
            locked.set()
            release.wait(60)

    holder = threading.Thread(target=in_threads, args=(dying_transaction, 1))
    holder.start()
    assert locked.wait(30)
    first = Reaper().tick()
    assert (first.dead_workers, first.returned_from_dead) == (1, 2)
    assert Worker.objects.filter(pk="gone:1:abc").exists()
    release.set()
    holder.join(30)
    second = Reaper().tick()
    assert (second.dead_workers, second.returned_from_dead) == (1, 1)
    assert Message.objects.filter(state=State.READY, attempts=1).count() == 3
    assert not Worker.objects.exists()


def test_concurrent_reapers_return_each_message_once():
    djqueue.create_queue("jobs", max_attempts=10)
    djqueue.send_batch("jobs", [{"n": i} for i in range(1200)])
    while djqueue.receive("jobs", max_messages=500):
        pass
    expire_all()
    totals = in_threads(lambda _: Reaper().tick().expired, 3)
    assert sum(totals) == 1200
    assert Message.objects.filter(state=State.READY).count() == 1200
    assert {len(m.errors) for m in Message.objects.all()} == {1}


def test_heartbeat_after_deregister_does_not_register_the_worker_again():
    """A worker deregisters before its heartbeat thread is told to stop; a beat in
    between finds no row and must leave it gone (it used to register the stopping
    worker again, leaving a stale row for the reaper)."""
    from djqueue.storage.registration import Registration

    presence = Registration("leaving:1:abc", "e" * 32, queues=["jobs"], concurrency=1,
                        held=lambda: [])
    presence.register()
    assert Worker.objects.filter(pk="leaving:1:abc").exists()
    presence.deregister()
    beating = threading.Thread(target=presence.beat)  # on its own thread, as a heartbeat
    beating.start()
    beating.join(timeout=30)
    assert not beating.is_alive()
    assert not Worker.objects.exists()
