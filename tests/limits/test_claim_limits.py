"""Limits in the claim itself: parsing, validation, and exactness under concurrent
claimers (threads on separate connections), on each database."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections, transaction
from django.db.models import F

import djqueue
from djqueue import rates
from djqueue.exceptions import ConfigurationError
from djqueue.models import Message, MessageGroup, QueueLimiter, State
from tests.conftest import in_threads

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(("text", "count", "period"), [
    ("50/s", 50, 1.0), ("300/m", 300, 60.0), ("1000/h", 1000, 3600.0), ("7/d", 7, 86400.0),
    ("10/5s", 10, 5.0), (" 100 / 15m ", 100, 900.0), ("0/s", 0, 1.0)])
def test_rates_are_read_as_written(text: str, count: int, period: float) -> None:
    rate = rates.parse_rate(text)
    assert rate == (count, period)
    assert rates.parse_rate(str(rate)) == rate


@pytest.mark.parametrize("text", ["50", "50/sec", "x/s", "5/0s", "-1/s", "9999999/s", "", 5,
                                  None, "1e3/s", "50/s;drop table"])
def test_a_bad_rate_is_refused_with_what_to_write(text: object) -> None:
    with pytest.raises(ValueError, match="rate"):
        rates.parse_rate(text)


def test_the_bucket_allows_count_plus_burst_minus_one_per_period() -> None:
    rate, burst = rates.parse_rate("50/s"), 5
    bucket, started, now = rates.Bucket(0.0, 0.0), [], 1000.0
    while now < 1010.0:  # a claimer asking every millisecond for ten seconds
        bucket = rates.refilled(bucket, rate, burst, now)
        if rates.whole_tokens(bucket):
            bucket = rates.Bucket(bucket.tokens - 1, bucket.at)
            started.append(now)
        now = round(now + 0.001, 6)
    most = max(sum(1 for t in started if s <= t < s + 1.0) for s in started)
    assert most == 50 + burst - 1
    assert 50 * 10 <= len(started) <= 50 * 10 + burst


def test_a_clock_read_behind_the_bucket_adds_nothing() -> None:
    rate = rates.parse_rate("10/s")
    bucket = rates.refilled(rates.Bucket(0.0, 100.0), rate, 5, 99.0)
    assert bucket == (0.0, 100.0)


@pytest.mark.parametrize(("options", "field"), [
    ({"rate_limit": "fast"}, "rate_limit"), ({"rate_burst": 0}, "rate_burst"),
    ({"group_rate_limit": "5/x"}, "group_rate_limit"), ({"group_concurrency": 0},
                                                       "group_concurrency"),
    ({"ordered": True, "group_concurrency": 2}, "group_concurrency")])
def test_bad_limits_are_refused_naming_the_option(options: dict, field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        djqueue.create_queue("l.bad", **options)
    queue = djqueue.create_queue("l.good")
    if "ordered" not in options:
        with pytest.raises(ConfigurationError, match=field):
            djqueue.set_limits(queue, **options)
    with pytest.raises(ConfigurationError, match="Unknown limit"):
        djqueue.set_limits(queue, rate="5/s")


def test_concurrent_claimers_never_pass_the_concurrency_limit() -> None:
    queue = djqueue.create_queue("l.conc", concurrency_limit=5)
    djqueue.send_batch(queue, [{"n": i} for i in range(200)])
    claimed: list[int] = []
    lock = threading.Lock()

    def claim(slot: int) -> int:
        got = djqueue.receive("l.conc", max_messages=3)
        with lock:
            claimed.extend(m.pk for m in got)
        return len(got)

    in_threads(claim, 8)
    assert len(claimed) == 5
    assert Message.objects.filter(state=State.CLAIMED).count() == 5
    limiter = QueueLimiter.objects.get(queue=queue)
    assert limiter.held_back >= 1 and limiter.throttled_since is not None
    # An ack frees a place at once; nothing else does.
    djqueue.ack_many(list(Message.objects.filter(pk__in=claimed[:2])))
    assert len(djqueue.receive("l.conc", max_messages=10)) == 2
    assert djqueue.receive("l.conc", max_messages=10) == []


def test_a_concurrency_limit_of_zero_starts_nothing_and_a_raise_starts_at_once() -> None:
    queue = djqueue.create_queue("l.zero", concurrency_limit=0)
    djqueue.send_batch(queue, [{"n": i} for i in range(5)])
    assert djqueue.receive(queue, max_messages=5) == []
    djqueue.set_limits("l.zero", concurrency_limit=3)
    assert len(djqueue.receive("l.zero", max_messages=5)) == 3
    djqueue.set_limits("l.zero", concurrency_limit=None)
    assert len(djqueue.receive("l.zero", max_messages=5)) == 2


def test_concurrent_claimers_take_no_more_than_the_buckets_tokens() -> None:
    queue = djqueue.create_queue("l.rate", rate_limit="10/h", rate_burst=4)
    djqueue.send_batch(queue, [{"n": i} for i in range(50)])
    counts = in_threads(lambda slot: len(djqueue.receive("l.rate", max_messages=3)), 8)
    assert sum(counts) == 4  # a full bucket, and a token every six minutes after it


def test_a_claim_that_waited_for_the_limiter_is_stamped_when_it_took_its_tokens() -> None:
    """The claim time is the limiter's clock reading, not the claim's start: a claim
    stamped before its wait would make claim times bunch past the rate's N + B - 1 in
    a window (56 of 50/s with a burst of 5 in a CI run). A transaction of another
    connection holds the limiter row (its write lock on SQLite) for half a second.
    The trace's claim event has the same time."""
    djqueue.create_queue("l.stamp", rate_limit="50/s", trace=True)
    djqueue.send("l.stamp", {"n": 1})
    holding, released = threading.Event(), []

    def hold_the_limiter() -> None:
        try:
            with transaction.atomic():
                QueueLimiter.objects.filter(queue__name="l.stamp").update(tokens=F("tokens"))
                holding.set()
                time.sleep(0.5)
                released.append(time.time())
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_limiter)
    holder.start()
    assert holding.wait(30)
    began = time.time()
    [message] = djqueue.receive("l.stamp")
    holder.join(30)
    assert message.claimed_at is not None and released
    assert message.claimed_at.timestamp() >= released[0] - 0.05, (
        message.claimed_at.timestamp() - began, released[0] - began)
    stored = Message.objects.get(pk=message.pk).claimed_at
    assert stored == message.claimed_at
    [claimed] = [e for e in djqueue.message_trace(message.pk) if e.event == "claimed"]
    assert claimed.at == message.claimed_at


def test_a_key_over_its_rate_is_passed_over_for_the_keys_behind_it() -> None:
    queue = djqueue.create_queue("l.keyrate", group_rate_limit="1/h", group_rate_burst=2)
    djqueue.send_batch(queue, [{"n": i} for i in range(100)], group_key="flood")
    for key in ("a", "b", "c"):
        djqueue.send_batch(queue, [{"n": i} for i in range(3)], group_key=key)
    # One claim takes each key's bucket (2) and no more of it: the flood's 100 messages
    # ahead do not fill the claim's candidates.
    got = djqueue.receive("l.keyrate", max_messages=10)
    assert sorted(m.group_key for m in got) == ["a", "a", "b", "b", "c", "c", "flood", "flood"]
    assert MessageGroup.objects.get(queue=queue, key="flood").throttled_until is not None
    assert djqueue.receive("l.keyrate", max_messages=10) == []  # every key is marked
    # A new per-key rate forgets the old marks, and the keys' buckets fill at it.
    djqueue.set_limits(queue, group_rate_limit="1000/s", group_rate_burst=100)
    got = djqueue.receive("l.keyrate", max_messages=200)
    assert len(got) == 98 + 3


def test_keys_sent_one_after_another_are_claimed_side_by_side() -> None:
    """Twenty keys of ten messages each, one token a key: a claim of ten takes one
    message of each of ten keys, and the next the other ten keys (the keys of the
    first are marked), in claim order within each."""
    queue = djqueue.create_queue("l.keyrate", group_rate_limit="1/h", group_rate_burst=1)
    for key in range(20):
        djqueue.send_batch(queue, [{"n": i} for i in range(10)], group_key=f"k{key:02}")
    first = djqueue.receive("l.keyrate", max_messages=10)
    second = djqueue.receive("l.keyrate", max_messages=10)
    assert [m.group_key for m in first] == [f"k{key:02}" for key in range(10)]
    assert [m.group_key for m in second] == [f"k{key:02}" for key in range(10, 20)]
    assert all(m.payload == {"n": 0} for m in first + second)
    assert djqueue.receive("l.keyrate", max_messages=10) == []


def test_concurrent_claimers_keep_each_keys_rate() -> None:
    queue = djqueue.create_queue("l.keyrate", group_rate_limit="1/h", group_rate_burst=3)
    for key in ("a", "b"):
        djqueue.send_batch(queue, [{"n": i} for i in range(20)], group_key=key)
    djqueue.send_batch(queue, [{"n": i} for i in range(4)])  # no key: no per-key limit
    got: list[Message] = []
    lock = threading.Lock()

    def claim(slot: int) -> None:
        for _ in range(3):
            messages = djqueue.receive("l.keyrate", max_messages=2)
            with lock:
                got.extend(messages)

    in_threads(claim, 6)
    keys = [m.group_key for m in got]
    assert keys.count("a") == 3 and keys.count("b") == 3 and keys.count(None) == 4


def test_group_concurrency_keeps_k_of_a_key_holding_and_a_raise_lets_more_in() -> None:
    queue = djqueue.create_queue("l.keys", group_concurrency=2)
    djqueue.send_batch(queue, [{"n": i} for i in range(6)], group_key="t1")
    djqueue.send_batch(queue, [{"n": i} for i in range(1)], group_key="t2")
    states = dict(Message.objects.filter(group_key="t1", state=State.READY)
                  .values_list("pk", "state"))
    assert len(states) == 2
    got = djqueue.receive(queue, max_messages=10)
    assert sorted(m.group_key for m in got) == ["t1", "t1", "t2"]
    djqueue.ack_many(got[:1])  # one of t1's places is free: the next takes it
    assert Message.objects.filter(group_key="t1", state=State.READY).count() == 1
    djqueue.set_limits(queue, group_concurrency=4)
    assert Message.objects.filter(group_key="t1", state=State.READY).count() == 3
    assert Message.objects.filter(group_key="t1", state=State.WAITING).count() == 1


def test_an_alarm_fires_when_a_limit_holds_ready_messages_back_too_long() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from djqueue.models import AlarmPolicy, Metric
    from djqueue.monitoring import alarms, rollups

    queue = djqueue.create_queue("l.alarm", concurrency_limit=1)
    djqueue.send_batch(queue, [{"n": i} for i in range(3)])
    assert len(djqueue.receive(queue, max_messages=3)) == 1  # held back from here on
    AlarmPolicy.objects.create(name="sms throttled", metric=Metric.THROTTLED, threshold=600)
    rollups.sample_depth()
    now = timezone.now()
    assert alarms.evaluate(now + timedelta(minutes=5)) == []
    [alarm] = alarms.evaluate(now + timedelta(minutes=11))
    assert alarm.subject == "l.alarm" and alarm.value >= 660
    # A claim that is not held back ends the spell.
    djqueue.set_limits(queue, concurrency_limit=None)
    djqueue.set_limits(queue, concurrency_limit=5)
    assert len(djqueue.receive(queue, max_messages=3)) == 2
    assert QueueLimiter.objects.get(queue=queue).throttled_since is None
