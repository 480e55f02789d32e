"""The tasks a djqueue worker may run: those a djqueue backend validated as they were
defined, found without importing anything a message names.

A task message carries its task's dotted path, and anyone who can send to a
task queue can write one. So the path is only looked up, never imported: a
task is known once its module has been imported by the project itself (every
installed app's ``tasks`` module, and the modules a backend's
``OPTIONS["TASK_MODULES"]`` lists, are imported when a worker starts or a
lookup misses). Django validates each task with its backend as the
``@task`` decorator defines it, which is where djqueue's backend records it.
"""

from __future__ import annotations

import threading
from importlib import import_module

from django.conf import settings
from django.utils.module_loading import autodiscover_modules

from djqueue.exceptions import UntrustedTask
from djqueue.tasks.compat import Task, task_backends

_known: dict[str, Task] = {}
_lock = threading.Lock()
_discovered = False


def remember(task: Task) -> None:
    """Called by QueueBackend.validate_task for every task defined for it."""
    _known.setdefault(task.module_path, task)


def discover() -> None:
    """Import the project's task modules, once per process: each installed app's
    ``tasks`` module and each djqueue backend's OPTIONS["TASK_MODULES"]."""
    global _discovered
    with _lock:
        if _discovered:
            return
        autodiscover_modules("tasks")
        for alias in getattr(settings, "TASKS", {}) or {}:
            read = getattr(task_backends[alias], "backend_options", None)  # djqueue's
            for module in read.task_modules if read is not None else ():
                import_module(module)
        _discovered = True


def find(path: str) -> Task:
    """The known task at ``path``; UntrustedTask if no djqueue backend validated one."""
    if not isinstance(path, str):
        raise UntrustedTask(f"A task message names its task by a dotted path, not {path!r}.")
    task = _known.get(path)
    if task is None:
        discover()
        task = _known.get(path)
    if task is None:
        raise UntrustedTask(
            f"{str(path)[:200]!r} is not a task defined for a djqueue backend (tasks are "
            "found in each installed app's tasks module and in the backend's "
            "OPTIONS['TASK_MODULES']); nothing was imported or run.")
    return task


def paths() -> list[str]:
    """The dotted paths of every known task, sorted (what a stored periodic schedule may
    name: the admin offers these)."""
    discover()
    return sorted(_known)


def expires_of(path: str) -> float | None:
    """The ``expires`` of the known task at ``path``, or None (none, or a task not
    known here: its message will be refused by the worker anyway). A workflow sends a
    step's message long after the step's task was defined, from its path alone."""
    return getattr(_known.get(path), "expires", None)
