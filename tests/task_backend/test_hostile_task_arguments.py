"""Every option of a djqueue task and of its enqueue, given each of a set of values no
caller should pass: the task is defined and enqueued, or refused with ``InvalidTask``
(django.tasks' error for a task its backend cannot run) or djqueue's own error, and a
refused enqueue sends nothing. tests/api/test_hostile_arguments.py does the same for
the queue API; a value that reaches a worker instead (``timeout="5"``) would fail every
run of the task, far from the line that set it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ObjectDoesNotExist

import djqueue
from djqueue.exceptions import DjqueueError
from djqueue.models import Message, TaskRecord, Workflow, WorkflowStep
from djqueue.tasks.backend import cancel
from djqueue.tasks.compat import InvalidTask, TaskResultDoesNotExist, task_backends
from tests import tasks
from tests.api.test_hostile_arguments import ODD, wrong_error

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task

pytestmark = pytest.mark.django_db(transaction=True)


def defined_with(**options: Any) -> Any:
    """``tests.tasks.add`` defined again with ``@task(**options)``."""
    return task(**options)(tasks.add.func)


#: name -> a call that defines or enqueues a task with the odd value ``v`` in one place
#: (``r``: a task's result, finished before it, for the calls that take one).
CALLS: dict[str, Callable[[Any, Any], Any]] = {
    "using(priority)": lambda r, v: tasks.add.using(priority=v).enqueue(1, 2),
    "using(run_after)": lambda r, v: tasks.add.using(run_after=v).enqueue(1, 2),
    "using(queue_name)": lambda r, v: tasks.add.using(queue_name=v).enqueue(1, 2),
    "enqueue(args)": lambda r, v: tasks.echo.enqueue(v),
    "enqueue(kwargs)": lambda r, v: tasks.echo.enqueue(x=v),
    "task(max_attempts)": lambda r, v: defined_with(max_attempts=v).enqueue(1, 2),
    "task(retry_on)": lambda r, v: defined_with(retry_on=v).enqueue(1, 2),
    "task(timeout)": lambda r, v: defined_with(timeout=v).enqueue(1, 2),
    "task(unique_key)": lambda r, v: defined_with(unique_key=v).enqueue(1, 2),
    "task(group_key)": lambda r, v: defined_with(group_key=v).enqueue(1, 2),
    "task(expires)": lambda r, v: defined_with(expires=v).enqueue(1, 2),
    "task(backoff)": lambda r, v: defined_with(backoff=v).enqueue(1, 2),
    "get_result(result_id)": lambda r, v: task_backends["default"].get_result(v),
    "cancel(result_id)": lambda r, v: cancel(v),
    "task_logs(result_id)": lambda r, v: djqueue.task_logs(v),
    "wait_for_result(timeout)": lambda r, v: djqueue.wait_for_result(r, timeout=v),
    "step(args)": lambda r, v: djqueue.step(tasks.echo, v).enqueue(),
    "step(kwargs)": lambda r, v: djqueue.step(tasks.echo, x=v).enqueue(),
    "step(task)": lambda r, v: djqueue.step(v, 1, 2).enqueue(),
    "group(parts)": lambda r, v: djqueue.group(v).enqueue(),
    "chord(members)": lambda r, v: djqueue.chord(v, djqueue.step(tasks.add, 1, 2)).enqueue(),
    "chord(callback)":
        lambda r, v: djqueue.chord([djqueue.step(tasks.add, 1, 2)], v).enqueue(),
    "workflow(parts)": lambda r, v: djqueue.workflow(v).enqueue(),
    "enqueue(name)": lambda r, v: djqueue.step(tasks.add, 1, 2).enqueue(name=v),
    "enqueue(policy)": lambda r, v: djqueue.step(tasks.add, 1, 2).enqueue(policy=v),
    "batch(on_success)": lambda r, v: in_batch(on_success=v),
    "batch(name)": lambda r, v: in_batch(name=v),
    "batch(database)": lambda r, v: in_batch(database=v),
}


def in_batch(**options: Any) -> None:
    """One task enqueued in ``djqueue.batch(**options)``."""
    with djqueue.batch(**options):
        tasks.add.enqueue(1, 2)

#: The odd values a djqueue option may take: None (the backend's own, or none). Any
#: other is refused as the task is defined; a value that reached a worker would fail
#: every run of the task, or be ignored.
OWN_OPTIONS = {"task(max_attempts)", "task(retry_on)", "task(timeout)", "task(unique_key)",
               "task(group_key)", "task(expires)", "task(backoff)"}
ACCEPTED_BY_OWN_OPTIONS = {"task(unique_key)": ("x", "x" * 5000, "a\x00b", True),
                           "task(group_key)": ("x", "x" * 5000, "a\x00b"),
                           "task(backoff)": ([1],)}


#: The errors a task's caller is meant to get: django.tasks' for a task or a result,
#: and djqueue's own.
OWN_ERRORS = (InvalidTask, DjqueueError, TaskResultDoesNotExist)


def database_rows() -> tuple:
    return (list(Message.objects.order_by("pk").values_list("pk", "state")),
            TaskRecord.objects.count(), Workflow.objects.count(), WorkflowStep.objects.count())


@pytest.mark.parametrize("call", CALLS)
def test_an_odd_task_option_is_refused_where_it_is_given(call):
    result = tasks.add.enqueue(1, 2)
    cancel(result.id)  # finished: a wait with no timeout returns at once
    wrong = []
    for value in ODD:
        before = database_rows()
        try:
            CALLS[call](result, value)
        except Exception as error:
            # A ValueError djqueue raises: a wait's timeout (djqueue.polling).
            wrong.append(wrong_error(error, value, own=OWN_ERRORS,
                                     raised=(TypeError, ValueError, ObjectDoesNotExist)))
            assert database_rows() == before, value
        else:
            if call in OWN_OPTIONS and value is not None and not any(
                    value is accepted or value == accepted
                    for accepted in ACCEPTED_BY_OWN_OPTIONS.get(call, ())):
                wrong.append(f"{value!r:.40}: accepted")
    assert not any(wrong), "\n".join(filter(None, wrong))


def test_retry_on_may_name_an_exception_defined_below_its_task():
    """While ``@task`` runs its module is still loading: a path into it is checked at
    enqueue, where a misspelt one is refused."""
    from tests.task_backend import retry_on_below

    result = retry_on_below.retried_on_an_error_below.enqueue()
    assert Message.objects.filter(pk=int(result.id)).exists()
    with pytest.raises(InvalidTask, match="NoSuchError', which could not be imported"):
        retry_on_below.retried_on_a_misspelt_error.enqueue()
