"""What the worker's log says: a failed run's outcome with its exception, the options
it started with and the counts it stopped with (djqueue.worker.ack_batches.log_failure,
WorkerOptions.__str__, WorkerStats.__str__)."""

import logging
import re

import pytest
from django.utils import timezone

import djqueue
from djqueue.api import receiving
from djqueue.models import Message
from djqueue.worker.ack_batches import AckBatches, Done, WorkerStats
from djqueue.worker.options import WorkerOptions


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
        # The retried message is claimed after its promotion, which a receive makes at
        # most once a PROMOTE_INTERVAL in a process: this test's previous receive's is recent.
        receiving._promotion.last.clear()
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


def test_the_start_line_says_the_options_that_shape_the_run():
    assert str(WorkerOptions(["jobs"])) == "1 handler thread, claims sized to the backlog"
    assert str(WorkerOptions(["jobs"], concurrency=8, batch_size=100, where="priority > 5",
                             visibility_timeout=90, time_limit=30, burst=True,
                             max_messages=1000, max_seconds=3600, max_rss=512)) == (
        "8 handler threads, claims of 100, only messages where priority > 5, leases of 90 s, "
        "a run limited to 30 s, until its queues are empty, for 1000 messages at most, for "
        "3600 s at most, restarting past 512 MB")
