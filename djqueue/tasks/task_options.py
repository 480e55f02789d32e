"""What a task's options may be: checked as the ``@task`` decorator defines it and as
it is enqueued (django.tasks calls the backend's ``validate_task`` at both).

Django's own check compares ``priority`` and reads ``run_after`` as a datetime, so an
option of the wrong type raised Python's ``TypeError`` or ``AttributeError`` from
inside Django; and djqueue's options (``QueueTask``) are first used by a worker, so a
``timeout="5"`` or ``max_attempts="3"`` failed every run of the task, far from the line
that set it. Each is checked here first and refused with ``InvalidTask`` naming it.
"""

from __future__ import annotations

import functools
import math
import sys
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.module_loading import import_string

from djqueue import durations
from djqueue.exceptions import shown_value
from djqueue.models.queue import MAX_ATTEMPTS, is_max_attempts, validate_backoff
from djqueue.tasks.compat import InvalidTask, Task


def check_task(task: Task) -> None:
    """InvalidTask naming the first of ``task``'s options that no run could use."""
    _check_django_options(task)
    max_attempts = getattr(task, "max_attempts", None)
    if max_attempts is not None and not is_max_attempts(max_attempts):
        raise InvalidTask(f"A task's max_attempts must be an integer from 1 to {MAX_ATTEMPTS},"
                          f" got {shown_value(max_attempts)}.")
    _check_retry_on(task)
    for name, high in (("timeout", durations.MAX_DELAY), ("expires", durations.MAX_RETENTION)):
        value = getattr(task, name, None)
        if value is not None:
            try:
                durations.check(value, f"A task's {name}", high=high)
            except ValueError as error:
                raise InvalidTask(str(error)) from None
    _check_keys(task)
    backoff = getattr(task, "backoff", None)
    if backoff is not None:
        try:
            validate_backoff(list(backoff) if isinstance(backoff, tuple) else backoff)
        except ValidationError as error:
            raise InvalidTask(f"A task's backoff: {' '.join(error.messages)}") from None


def _check_django_options(task: Task) -> None:
    """The options Django checks itself, checked for their type first."""
    priority = task.priority
    if isinstance(priority, bool) or not isinstance(priority, int | float) or (
            not math.isfinite(priority)):
        raise InvalidTask(f"A task's priority must be a whole number, got "
                          f"{shown_value(priority)}.")
    if task.run_after is not None and not isinstance(task.run_after, datetime):
        raise InvalidTask(f"A task's run_after must be a datetime or None, got "
                          f"{shown_value(task.run_after)}.")
    if not isinstance(task.queue_name, str):
        raise InvalidTask(f"A task's queue_name must be a queue's name, got "
                          f"{shown_value(task.queue_name)}.")


def _check_retry_on(task: Task) -> None:
    retry_on = getattr(task, "retry_on", None)
    if retry_on is not None:
        # While ``@task`` runs, the task's own module is still being executed (the
        # decorated name is bound after it returns): a path to an exception defined
        # below the task in that module is checked at enqueue instead.
        module = sys.modules.get(task.func.__module__)
        loading = task.func.__module__ if module is not None and not hasattr(
            module, task.func.__name__) else None
        try:
            exception_classes(retry_on, "A task's retry_on", loading=loading)
        except ValueError as error:
            raise InvalidTask(str(error)) from None


@functools.lru_cache(maxsize=1024)
def retry_classes(entries: tuple[Any, ...]) -> tuple[type[BaseException], ...]:
    """A task's ``retry_on`` as exception classes, its paths imported once per process
    (a worker asks at each failed run); ValueError as :func:`exception_classes`."""
    return exception_classes(entries, "A task's retry_on")


def exception_classes(entries: Any, name: str, *, loading: str | None = None,
                      ) -> tuple[type[BaseException], ...]:
    """``entries`` (a task's ``retry_on``, a backend's ``RETRY_ON``) as the exception
    classes they are or name by dotted path; ValueError naming ``name`` otherwise. A path
    is imported here, as the project's own code or settings give it (never because a
    message names it), so a misspelt one is refused at once, not at the first retry;
    one into the module ``loading`` (still being executed) that names what it does not
    hold yet is passed over."""
    if not isinstance(entries, list | tuple):
        raise ValueError(f"{name} must be a list or tuple of exception classes or their "
                         f"dotted paths, got {shown_value(entries)}.")
    found: list[type[BaseException]] = []
    for entry in entries:
        value: Any = entry
        if isinstance(entry, str):
            try:
                value = import_string(entry)
            except ImportError:
                if loading is not None and entry.rpartition(".")[0] == loading:
                    continue
                raise ValueError(f"{name} names {shown_value(entry)}, which could not be "
                                 "imported.") from None
        if not (isinstance(value, type) and issubclass(value, BaseException)):
            raise ValueError(f"{name} holds {shown_value(entry)}, which is not an exception "
                             "class.")
        found.append(value)
    return tuple(found)


def _check_keys(task: Task) -> None:
    """``unique_key``: True, False, a string or a callable; ``group_key``: a keyword
    argument's name or a callable. An empty string names nothing."""
    unique_key = getattr(task, "unique_key", None)
    if not (unique_key is None or isinstance(unique_key, bool) or callable(unique_key) or (
            isinstance(unique_key, str) and unique_key)):
        raise InvalidTask(f"A task's unique_key must be True, a non-empty string or a "
                          f"callable, got {shown_value(unique_key)}.")
    group_key = getattr(task, "group_key", None)
    if not (group_key is None or callable(group_key) or (
            isinstance(group_key, str) and group_key)):
        raise InvalidTask(f"A task's group_key must name a keyword argument or be a "
                          f"callable, got {shown_value(group_key)}.")
