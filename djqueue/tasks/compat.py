"""The Tasks framework: ``django.tasks`` on Django >= 6.0, the ``django_tasks`` backport before.

Why one module: the backport names two exceptions (and the logger of task runs,
``task_run_logger``) differently; everything else matches, so the rest of djqueue
imports from here.
"""

import logging

try:
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks import signals as _signals
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    # The logger Django's receivers of those signals log each run on.
    task_run_logger = logging.getLogger("django.tasks")
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks import signals as _signals
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    # The logger the backport's receivers of those signals log each run on.
    task_run_logger = logging.getLogger("django_tasks")

#: The framework's own receivers of ``task_started`` and ``task_finished``, which log each
#: run on ``task_run_logger`` (None where a version names them otherwise).
run_log_receivers = (getattr(_signals, "log_task_started", None),
                     getattr(_signals, "log_task_finished", None))

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "run_log_receivers",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_run_logger",
    "task_started",
]
