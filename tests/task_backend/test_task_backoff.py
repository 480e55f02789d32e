"""A task's own ``backoff`` (``@task(backoff=[...])``): its retries wait its steps,
lengthened by its queue's ``retry_jitter``, instead of the queue's backoff (Celery's
per-task retry delays)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from django.utils import timezone

import djqueue
from djqueue.models import Message, State
from djqueue.storage.requeueing import promote_due
from djqueue.tasks.compat import InvalidTask, TaskResultStatus
from tests import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def _run_once() -> float:
    """Drain one run of the task's message; the seconds its retry was put off by."""
    before = timezone.now()
    assert djqueue.drain("t.retrying").runs == 1
    row = Message.objects.get(queue__name="t.retrying")
    assert row.state == State.SCHEDULED
    Message.objects.filter(pk=row.pk).update(visible_at=timezone.now())  # due at once
    promote_due()
    return (row.visible_at - before).total_seconds()


def test_a_tasks_own_backoff_spaces_its_retries_with_its_queues_jitter():
    """The queue's backoff is 0.1 s and its jitter 0.1 (tests/settings.py)."""
    result = tasks.fails_with_own_backoff.enqueue(1)
    first, second = _run_once(), _run_once()
    assert 30 <= first <= 33 + 1 and 120 <= second <= 132 + 1, (first, second)
    assert djqueue.drain("t.retrying").runs == 1  # the third of MAX_ATTEMPTS 3
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and len(result.errors) == 3


def test_a_retry_after_wins_over_the_tasks_backoff():
    tasks.fails_with_own_backoff.enqueue(2, asked=5)
    assert 5 <= _run_once() <= 5 + 1


def test_a_tuple_is_a_backoff_too():
    assert dataclasses.replace(tasks.fails_with_own_backoff, backoff=(5, 10)).backoff == (5, 10)


@pytest.mark.parametrize("backoff", [[], [-1], ["10"], "10", [1e300], [math.nan],
                                     list(range(101)), {"first": 1}])
def test_a_bad_backoff_is_refused_when_the_task_is_defined(backoff):
    with pytest.raises(InvalidTask, match="A task's backoff"):
        dataclasses.replace(tasks.fails_with_own_backoff, backoff=backoff)
