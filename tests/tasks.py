"""Tasks written against the public django.tasks API only."""

import logging
import time
from datetime import timedelta

import djqueue

try:
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, task

from tests.models import Effect


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def task_run_log_level() -> int:
    """The level at which the Tasks framework's run records are made in this process."""
    try:
        import django.tasks  # noqa: F401
    except ImportError:  # the backport
        return logging.getLogger("django_tasks").getEffectiveLevel()
    return logging.getLogger("django.tasks").getEffectiveLevel()


@task(priority=10, queue_name="t.tasks")
def shout(text: str) -> str:
    return text.upper()


@task
async def async_square(x: int) -> int:
    return x * x


@task(takes_context=True)
def which_attempt(context: TaskContext, marker: str) -> dict:
    return {"attempt": context.attempt, "id": context.task_result.id, "marker": marker}


@task
def echo(*args, **kwargs) -> dict:
    return {"args": list(args), "kwargs": kwargs}


@task
def explode() -> None:
    raise KeyError("missing thing")


@task
def explode_unstorably() -> None:
    raise ValueError("a NUL \x00 and a lone surrogate \udcff in one error")


@task
def slow_first_time(n: int) -> str:
    """Sleeps a long time on its first run only, so a test can kill the worker mid-task."""
    first = not Effect.objects.filter(key=n).exists()
    Effect.objects.create(key=n)
    if first:
        time.sleep(600)
    return "done"


@task(backend="retrying", queue_name="t.retrying")
def fails_twice(n: int) -> int:
    Effect.objects.create(key=n)
    if Effect.objects.filter(key=n).count() < 3:
        raise ValueError("not yet")
    return n


@task(backend="retrying", queue_name="t.retrying", backoff=[30, 120])
def fails_with_own_backoff(n: int, asked: float | None = None) -> int:
    """Always fails: with a RetryAfter of ``asked`` seconds if given, else a ValueError."""
    Effect.objects.create(key=n)
    if asked is not None:
        raise djqueue.RetryAfter(asked)
    raise ValueError("the mail server is still down")


@task(backend="retrying", queue_name="t.asks.tasks")
def asks_later(n: int, postpones: int, failures: int) -> int:
    """Postpones (0.1 s) its first ``postpones`` runs, then raises RetryAfter(0.1) from a
    ConnectionError (not in its backend's RETRY_ON) ``failures`` times, then returns n."""
    Effect.objects.create(key=n)
    runs = Effect.objects.filter(key=n).count()
    if runs <= postpones:
        raise djqueue.Postpone(0.1)
    if runs <= postpones + failures:
        try:
            raise ConnectionError("the service answered 503")
        except ConnectionError as exc:
            raise djqueue.RetryAfter(timedelta(seconds=0.1)) from exc
    return n


@task(queue_name="t.tasks")
def postpones_badly(delay: float) -> None:
    """Asks to be postponed by ``delay``, which the tests make out of bounds."""
    raise djqueue.Postpone(delay)


@task(queue_name="t.tasks", expires=0.2)
def expiring_add(a: int, b: int) -> int:
    return a + b


@task(unique_key=True)
def refresh_cache(name: str) -> str:
    return name


@task(timeout=0.5)
def oversleeps(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


@task(takes_context=True)
def cooperative(context: TaskContext, n: int) -> str:
    """Works in small steps until cancellation is requested (djqueue's cancel API)."""
    from djqueue.exceptions import TaskCancelled
    from djqueue.tasks.backend import cancel_requested

    Effect.objects.create(key=n)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if cancel_requested(context):
            raise TaskCancelled("stopped on request")
        time.sleep(0.05)
    return "never cancelled"


@task(backend="limited", queue_name="t.limited")
def notify(text: str, tenant: str | None = None) -> str:
    return f"{tenant}: {text}"


@task
def import_rows(count: int) -> int:
    """Reports its progress every row (the worker writes at most one a PROGRESS_INTERVAL)."""
    for row in range(1, count + 1):
        djqueue.report_progress(row / count, f"imported {row} of {count}")
    logging.getLogger("tests.import").info("imported %d rows", count)
    return count


# Workflow steps (tests/task_backend/test_workflows.py). Each records its run (a Run row:
# key, start, finish, pid), so the tests can check what ran, when and where.

def _timed(key: int, work: float = 0.0, hold: str | None = None) -> None:
    import os
    from pathlib import Path

    from tests.models import Run

    started = time.time()
    if hold is not None:
        Effect.objects.create(key=key)  # tells the test it started
        deadline = time.monotonic() + 60
        while not Path(hold).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    time.sleep(work)
    Run.objects.create(key=key, started=started, finished=time.time(), pid=os.getpid())


@task(backend="workflows", queue_name="t.wf")
def wf_add(a: int, b: int) -> int:
    return a + b


@task(backend="workflows", queue_name="t.wf-final")
def wf_total(results: list[int]) -> int:
    """A chord's callback: runs in its ack's transaction, so its Effect row is exactly-once."""
    Effect.objects.create(key=len(results))
    return sum(results)


@task(backend="workflows", queue_name="t.wf")
def wf_node(key: int, work: float = 0.0, hold: str | None = None) -> int:
    _timed(key, work, hold)
    return key


@task(backend="workflows", queue_name="t.wf")
def wf_fail_while(key: int, marker: str) -> int:
    """Fails while the file ``marker`` exists."""
    from pathlib import Path

    _timed(key)
    if Path(marker).exists():
        raise ValueError(f"step {key} failed: {marker} exists")
    return key


@task(backend="workflows", queue_name="t.wf-final")
def wf_report(results: list, failures: list | None = None) -> dict:
    return {"results": results, "failures": failures}


@task(backend="workflows", queue_name="t.wf-final", expires=0.3)
def wf_expiring(key: int) -> int:
    _timed(key)
    return key


@task
def returns_unstorably() -> str:
    return "a NUL \x00 in a return value"
