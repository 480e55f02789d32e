"""When a worker's loop is woken for finished handler runs (djqueue.worker.ack_batches):
at the count it waits for, for the first result, and for a failure, which is recorded
at once; a result already settled in its handler (exactly-once) waits like an ack."""

import time

from djqueue.models import Message
from djqueue.worker.ack_batches import ACK_DELAY, AckBatches, Done, WorkerStats


def batches(wake_at: int) -> AckBatches:
    found = AckBatches("w", WorkerStats(), forget=lambda message: None)
    found.add(Done(Message(pk=1)))  # the first result always wakes the loop
    found.collect()
    found.wait_for(wake_at - 1)
    return found


def test_results_settled_in_their_handlers_wait_for_the_count_like_acks():
    acks = batches(wake_at=4)
    wakes = [acks.add(Done(Message(pk=n), acked=n % 2 == 0, lost=n == 3)) for n in (2, 3)]
    assert wakes == [False, False]
    assert acks.add(Done(Message(pk=4), acked=True))  # the fourth: the count
    acks.collect()
    due = acks.due(batch_size=100)
    assert due is not None and due > time.monotonic() - 1 and due <= time.monotonic() + ACK_DELAY


def test_a_failure_wakes_the_loop_and_is_due_at_once():
    acks = batches(wake_at=10)
    assert acks.add(Done(Message(pk=2), error="Traceback ..."))
    acks.collect()
    assert acks.due(batch_size=100) <= time.monotonic()
    dead = batches(wake_at=10)
    assert dead.add(Done(Message(pk=2), error="UnprocessableMessage", dead=True))

