"""A receive waiting in one process is woken by a send committed in another
(djqueue.api.receive_wakeups): its process registers a receiver row naming the queues
it waits on, and a sender's datagram ends its pause."""

from __future__ import annotations

import json
import os
import time

import pytest

import djqueue
from djqueue.api.receive_wakeups import receive_wakeups
from djqueue.api.worker_wakeups import wake_addresses
from djqueue.models import ProcessKind, Worker
from tests.conftest import wait_until
from tests.refused_rows import RefusedRows

pytestmark = pytest.mark.django_db(transaction=True)

#: The receiving process polls only this often: a receive back sooner was woken.
POLL = 60.0
RECEIVE = """
import json, time, djqueue
[message] = djqueue.receive("t.woken", wait=120)
print(json.dumps({"payload": message.payload, "at": time.time()}), flush=True)
message.ack()
"""
ARECEIVE = """
import asyncio, json, time, djqueue

async def main():
    [message] = await djqueue.areceive("t.woken", wait=120)
    print(json.dumps({"payload": message.payload, "at": time.time()}), flush=True)
    await message.aack()

asyncio.run(main())
"""


def receiver_rows(queue: str | None = None) -> list[Worker]:
    return [w for w in Worker.objects.filter(pk__startswith="receive:")
            if queue is None or queue in w.queues]


@pytest.mark.parametrize("script", [RECEIVE, ARECEIVE], ids=["receive", "areceive"])
def test_a_send_from_another_process_wakes_a_waiting_receive_at_once(spawn, script):
    djqueue.create_queue("t.woken")
    receiver = spawn("shell", "-c", script, env={"DJQUEUE_TEST_POLL": str(POLL)})
    [row] = wait_until(lambda: receiver_rows("t.woken"), 60, "the receiver's row")
    assert row.wake_address and row.concurrency == 0 and row.kind == ProcessKind.RECEIVE
    wake_addresses.forget()  # this process may have read the rows before the receiver's
    sent_at = time.time()
    djqueue.send("t.woken", {"n": 1})
    # It polls every 60 s: back within 20, it was woken by the send's datagram.
    assert receiver.wait(20) == 0, receiver.log.read_text()
    got = json.loads(receiver.log.read_text().strip().splitlines()[-1])
    assert got["payload"] == {"n": 1}
    assert got["at"] - sent_at < 5
    assert not receiver_rows(), "the row goes when its process exits"
    assert not djqueue.peek("t.woken")


def test_a_waiting_receive_registers_its_queues_and_stop_deletes_the_row():
    djqueue.create_queue("t.woken")
    djqueue.create_queue("t.other")
    assert djqueue.receive(["t.woken", "t.other"], wait=0.05) == []
    [row] = wait_until(lambda: receiver_rows("t.other"), 30, "the receiver's row")
    assert sorted(row.queues) == ["t.other", "t.woken"], "named after the wait ended"
    assert row.wake_address == receive_wakeups.address
    receive_wakeups.stop()
    assert not receiver_rows()
    assert djqueue.receive("t.woken", wait=0) == [], "a receive that does not wait"
    assert receive_wakeups.address is None, "starts nothing"


# The child only reads one attribute and exits: nothing there can wait on a lock that a
# thread of the parent held at the fork.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_starts_its_own_row_not_the_parents():
    djqueue.create_queue("t.woken")
    djqueue.receive("t.woken", wait=0.05)
    assert receive_wakeups.address is not None
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread does not run here, nor is its row ours
        os._exit(0 if receive_wakeups.address is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_wake_host_that_is_not_this_hosts_leaves_receives_polling(settings, caplog):
    settings.DJQUEUE = {**settings.DJQUEUE, "WAKE_HOST": "192.0.2.1"}  # TEST-NET-1
    djqueue.create_queue("t.woken")
    assert djqueue.receive("t.woken", wait=0.05) == []
    assert djqueue.receive("t.woken", wait=0.05) == []
    said = [r.getMessage() for r in caplog.records if "WAKE_HOST" in r.getMessage()]
    assert len(said) == 1 and "'192.0.2.1'" in said[0] and "polling" in said[0], said
    assert receive_wakeups.address is None and not receiver_rows()
    djqueue.send("t.woken", {"n": 1})
    assert len(djqueue.receive("t.woken", wait=5)) == 1


def test_a_receiver_row_the_database_refused_is_written_by_a_heartbeat(caplog):
    """The database refuses the receiver row when the first receive waits. The receive
    still returns, and once the database takes rows again a heartbeat writes the row,
    naming the queue, so senders can wake this process."""
    djqueue.create_queue("t.woken")
    refused = RefusedRows(Worker._meta.db_table)
    refused.on()
    try:
        assert djqueue.receive("t.woken", wait=0.05) == []
        wait_until(lambda: any("Could not register receive:" in r.getMessage()
                               for r in caplog.records), 30, "the refused registration")
        assert not receiver_rows()
    finally:
        refused.off()
    [row] = wait_until(lambda: receiver_rows("t.woken"), 30, "a heartbeat to write the row")
    assert row.wake_address == receive_wakeups.address
