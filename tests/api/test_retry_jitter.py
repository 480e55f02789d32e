"""A retry's backoff step lengthened at random by the queue's ``retry_jitter``, so that
messages that failed together (a downstream outage) do not all come back together."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

import djqueue
from djqueue.conf import get_settings
from djqueue.exceptions import ConfigurationError
from djqueue.models import Message, Queue, State

pytestmark = pytest.mark.django_db(transaction=True)


def _fail_all(queue: str, count: int) -> tuple[list[float], float]:
    """Send ``count`` messages, receive and nack them all with an error; the delay each
    got before its retry (seconds after the nacks began), and how long the nacks took."""
    djqueue.send_batch(queue, [{"n": i} for i in range(count)])
    got = djqueue.receive(queue, max_messages=count)
    assert len(got) == count
    before = timezone.now()
    for message in got:
        message.nack(error="the mail server is down")
    spent = (timezone.now() - before).total_seconds()
    rows = Message.objects.filter(queue__name=queue)
    assert {row.state for row in rows} == {State.SCHEDULED}
    return [(row.visible_at - before).total_seconds() for row in rows], spent


def test_messages_that_fail_together_retry_spread_over_the_jitter():
    djqueue.create_queue("jobs", backoff=[10], retry_jitter=0.5)
    delays, spent = _fail_all("jobs", 50)
    assert all(10 <= d <= 15 + spent for d in delays), delays
    # 50 draws from [10, 15): all within one 0.5 s tenth of that span would be 1 in 10**48.
    assert max(delays) - min(delays) > 0.5 + spent
    assert len({round(d, 3) for d in delays}) > 40


def test_a_jitter_of_zero_keeps_the_exact_steps():
    djqueue.create_queue("jobs", backoff=[7], retry_jitter=0)
    delays, spent = _fail_all("jobs", 20)
    assert all(7 <= d <= 7 + spent for d in delays), delays


def test_the_jitter_lengthens_each_step_of_the_schedule():
    queue = djqueue.create_queue("jobs", backoff=[1, 60, 600], retry_jitter=0.2)
    for attempt, step in [(1, 1), (2, 60), (3, 600), (9, 600)]:
        delays = [queue.retry_delay(attempt).total_seconds() for _ in range(200)]
        assert step <= min(delays) and max(delays) <= step * 1.2
        assert max(delays) - min(delays) > step * 0.1  # the draws spread


def test_the_default_comes_from_settings():
    assert djqueue.create_queue("default.jitter").retry_jitter == 0.1
    with override_settings(DJQUEUE={"RETRY_JITTER": 0}):
        assert djqueue.create_queue("exact").retry_jitter == 0
    with override_settings(DJQUEUE={"RETRY_JITTER": 1}):
        assert djqueue.create_queue("doubled").retry_jitter == 1


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf, "lots", [0.1]])
def test_a_jitter_outside_zero_to_one_is_refused(bad):
    with pytest.raises(ConfigurationError, match="retry_jitter"):
        djqueue.create_queue("jobs", retry_jitter=bad)
    assert not Queue.objects.filter(name="jobs").exists()
    with override_settings(DJQUEUE={"RETRY_JITTER": bad}), pytest.raises(
            ConfigurationError, match="RETRY_JITTER"):
        get_settings()


def test_an_absurd_stored_jitter_is_read_clamped():
    """A row written past the checks (by hand) never makes a retry overflow or come
    sooner than its step."""
    queue = djqueue.create_queue("jobs", backoff=[10])
    for stored, longest in [(1e300, 20), (-5, 10)]:  # SQLite and MariaDB store no NaN
        Queue.objects.filter(pk=queue.pk).update(retry_jitter=stored)
        queue.refresh_from_db()
        delays = [queue.retry_delay(1) for _ in range(50)]
        assert all(timedelta(seconds=10) <= d <= timedelta(seconds=longest) for d in delays)
