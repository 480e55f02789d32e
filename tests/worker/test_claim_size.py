"""The worker's adaptive claim size (djqueue.worker.prefetch): large on a backlog of fast
messages, small for slow handlers and an idle queue, fixed by ``--batch-size``."""

import re
import signal
from collections import Counter

import pytest

import djqueue
from djqueue.models import History, Worker
from djqueue.worker.prefetch import CLAIM_SECONDS, FIRST, LARGEST, SMALLEST, Prefetch
from tests.conftest import wait_until


def claim_sizes() -> list[int]:
    """The messages of each claim, in claim order: one claim stamps one claimed_at."""
    stamps = Counter(History.objects.values_list("claimed_at", flat=True))
    return [stamps[at] for at in sorted(stamps)]


def test_full_claims_double_the_size_up_to_the_largest():
    prefetch = Prefetch(concurrency=1, batch_size=None)
    sizes = [prefetch.batch_size]
    for _ in range(10):
        prefetch.claimed(0.001, asked=prefetch.batch_size, got=prefetch.batch_size)
        sizes.append(prefetch.batch_size)
    assert sizes[0] == FIRST
    assert sizes[:4] == [FIRST, 2 * FIRST, 4 * FIRST, 8 * FIRST]
    assert sizes[-1] == LARGEST


def test_a_short_claim_asks_next_for_twice_what_it_got():
    prefetch = Prefetch(concurrency=1, batch_size=None)
    prefetch.size = LARGEST
    prefetch.claimed(0.001, asked=LARGEST, got=30)
    assert prefetch.batch_size == 60
    prefetch.claimed(0.001, asked=60, got=0)  # idle
    assert prefetch.batch_size == SMALLEST


def test_a_claim_cut_short_by_room_does_not_grow_the_size():
    prefetch = Prefetch(concurrency=1, batch_size=None)
    prefetch.claimed(0.001, asked=3, got=3)
    assert prefetch.batch_size == FIRST


def test_slow_handlers_get_claims_of_their_share_of_work():
    prefetch = Prefetch(concurrency=4, batch_size=None)
    prefetch.size = LARGEST
    prefetch.handled(0.1)
    assert prefetch.batch_size == int(4 * CLAIM_SECONDS / 0.1)
    prefetch.handled(100.0)
    assert prefetch.batch_size == 1


def test_a_batch_size_given_stays():
    prefetch = Prefetch(concurrency=1, batch_size=7)
    prefetch.handled(5.0)
    for got in (7, 0, 7):
        prefetch.claimed(0.001, asked=7, got=got)
        assert prefetch.batch_size == 7


@pytest.mark.django_db(transaction=True)
def test_a_worker_at_its_defaults_drains_a_backlog_in_large_claims(spawn):
    djqueue.create_queue("t.noop")
    djqueue.send_batch("t.noop", [{"n": i} for i in range(3000)])
    worker = spawn("djqueue_worker", "t.noop", "--burst")
    assert worker.wait(120) == 0, worker.output()
    sizes = claim_sizes()
    assert sum(sizes) == 3000
    # 10, 20, ..., 320, then 500 a claim: a dozen claims, where -b 10 would take 300.
    assert len(sizes) <= 20, sizes
    assert max(sizes) == LARGEST, sizes


@pytest.mark.django_db(transaction=True)
def test_a_worker_at_its_defaults_claims_little_for_slow_handlers(spawn):
    djqueue.create_queue("t.slow")
    djqueue.send_batch("t.slow", [{"n": i, "sleep": 0.05} for i in range(1, 25)])
    worker = spawn("djqueue_worker", "t.slow", "--burst")
    assert worker.wait(120) == 0, worker.output()
    sizes = claim_sizes()
    assert sum(sizes) == 24
    assert sizes[0] == FIRST  # before any handler has run
    # Each run takes over 50 ms, so a claim asks for at most 0.2 s of it: 4 messages.
    assert max(sizes[1:]) <= int(CLAIM_SECONDS / 0.05), sizes


@pytest.mark.django_db(transaction=True)
def test_a_trickling_queue_costs_two_claims_a_message(spawn):
    """One claim takes the message, the next acks it: a claim that came back short is
    not followed at once by one that finds nothing (the worker waits for the handler,
    a send's wake-up or its poll). Polls every 60 s here, so only those claims count."""
    djqueue.create_queue("t.noop")
    worker = spawn("djqueue_worker", "t.noop", env={"DJQUEUE_TEST_POLL": "60",
                                                        "DJQUEUE_TEST_LOG_INFO": "1"})
    wait_until(lambda: Worker.objects.exclude(wake_address="").exists(), 60, "the worker")
    sent = 10
    for n in range(sent):
        djqueue.send("t.noop", {"n": n})
        wait_until(lambda n=n: History.objects.count() == n + 1, 60,
                   f"message {n}\n{worker.output()}")
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output()
    stats = re.search(r"claimed in (\d+) claims", worker.output())
    assert stats, worker.output()
    # The worker's first claim at start, then two a message (four before: 41).
    assert int(stats.group(1)) <= 1 + 2 * sent, stats.group(0)


def test_a_wake_up_the_loop_has_answered_does_not_end_its_next_sleep():
    """A handler's result that came in while the loop was busy is collected by the next
    pass; it must not also cut that pass's sleep short (an extra claim that finds
    nothing), while a wake-up after the pass began still does."""
    from djqueue.polling import Backoff, local_wakeup

    backoff = Backoff()
    local_wakeup.notify()  # a result delivered while the loop claims
    assert local_wakeup.wait(backoff.seen, 0)  # before: the next sleep would end at once
    backoff.answered()  # the pass that collects it starts
    assert not local_wakeup.wait(backoff.seen, 0)
    local_wakeup.notify()  # a send committed after the pass began
    assert local_wakeup.wait(backoff.seen, 0)
