"""When a worker's loop is woken for finished handler runs (djqueue.worker.ack_batches):
at the count it waits for, for the first result, and for a failure, which is recorded
at once; a result already settled in its handler (exactly-once) waits like an ack."""

import logging
import re
import time

import pytest
from django.utils import timezone

import djqueue
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


@pytest.mark.django_db(transaction=True)
def test_a_failed_run_is_logged_with_its_queue_its_outcome_and_its_exception(caplog):
    """A retry is a WARNING with its wait; a dead letter, the end of the message's runs,
    an ERROR naming the dead-letter queue (or none); each with the exception's line."""
    dead = djqueue.create_queue("log.dead")
    djqueue.create_queue("log", max_attempts=2, backoff=[30], retry_jitter=0,
                         dead_letter_queue=dead)
    djqueue.create_queue("log.kept", max_attempts=1)
    traceback = 'Traceback (most recent call last):\n  File "x.py", line 1\nKeyError: \'sku\'\n'
    sent = djqueue.send("log", {}), djqueue.send("log.kept", {})
    acks = AckBatches("w", WorkerStats(), forget=lambda message: None)
    caplog.set_level(logging.WARNING, logger="djqueue.worker")
    for queue in ("log", "log", "log.kept"):
        [message] = djqueue.receive(queue, visibility_timeout=0.01 if queue == "log" else 30)
        acks.add(Done(message, error=traceback))
        acks.collect()
        assert acks.flush() == {}
        if queue == "log":
            Message.objects.filter(pk=message.pk).update(visible_at=timezone.now())
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said[0][0] == "WARNING" and re.fullmatch(
        rf"Message {sent[0].pk} of log failed on attempt 1; retrying in 30\.0 s: "
        r"KeyError: 'sku'", said[0][1]), said
    assert said[1:] == [
        ("ERROR", f"Message {sent[0].pk} of log failed on attempt 2 and was dead-lettered to "
                  "log.dead: KeyError: 'sku'"),
        ("ERROR", f"Message {sent[1].pk} of log.kept failed on attempt 1 and was dead-lettered "
                  "in its queue: KeyError: 'sku'")]
    assert acks.stats.failed == 3
    assert re.fullmatch(r"\d+\.\d s, 0 claimed in 0 claims \(0 failed\), 0 acked, 3 failed, "
                        r"0 postponed, 0 released, 0 lost", str(acks.stats))
