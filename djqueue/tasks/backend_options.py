"""A djqueue task backend's ``OPTIONS``, read and checked as the backend is made.

Django makes a task backend the first time it is used (as ``@task`` defines a task,
or at a process's first enqueue), so a bad value here stops the process at once with
``ConfigurationError`` naming the setting, where it was ``int()``'s or
``import_string``'s own error, or was kept and failed later (``ENQUEUE_ON_COMMIT``
naming no database failed every enqueue; a misspelt key was ignored). The queue
options in ``QUEUE_OPTIONS`` are checked by the backend's system check
(:func:`queue_option_errors`): a queue row's checks need the app registry, which a
task defined while it loads would not have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from djqueue.exceptions import ConfigurationError, shown_value
from djqueue.models.queue import MAX_ATTEMPTS, is_max_attempts
from djqueue.storage.queue_lookup import check_options
from djqueue.tasks.task_options import exception_classes

KNOWN_OPTIONS = ("MAX_ATTEMPTS", "RETRY_ON", "QUEUE_OPTIONS", "GROUP_KEY_KWARG",
                 "ENQUEUE_ON_COMMIT", "TASK_MODULES")


@dataclass(frozen=True, slots=True)
class BackendOptions:
    max_attempts: int = 1
    retry_on: tuple[type[BaseException], ...] = ()
    #: Options of every queue the backend creates.
    queue_options: dict[str, Any] = field(default_factory=dict)
    #: A queue's own options (its limits, say), by its name.
    per_queue_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    group_key_kwarg: str | None = None
    enqueue_on_commit: str | None = None
    task_modules: tuple[str, ...] = ()


def read_options(alias: str, options: Any) -> BackendOptions:
    """``TASKS[alias]["OPTIONS"]`` checked; ConfigurationError naming the first bad one."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, dict):
        raise ConfigurationError(f"{where} must be a dict, got {shown_value(options)}.")
    unknown = sorted(set(options) - set(KNOWN_OPTIONS), key=str)
    if unknown:
        raise ConfigurationError(f"{where} has unknown key(s) {', '.join(map(repr, unknown))};"
                                 f" djqueue's backend takes {', '.join(KNOWN_OPTIONS)}.")
    max_attempts = options.get("MAX_ATTEMPTS", 1)
    if not is_max_attempts(max_attempts):
        raise ConfigurationError(f"{where}['MAX_ATTEMPTS'] must be an integer from 1 to "
                                 f"{MAX_ATTEMPTS}, got {shown_value(max_attempts)}.")
    try:
        retry_on = exception_classes(options.get("RETRY_ON", ()), f"{where}['RETRY_ON']")
    except ValueError as error:
        raise ConfigurationError(str(error)) from None
    shared, own = _queue_options(where, options.get("QUEUE_OPTIONS", {}))
    return BackendOptions(
        max_attempts=max_attempts, retry_on=retry_on, queue_options=shared,
        per_queue_options=own,
        group_key_kwarg=_text(where, options, "GROUP_KEY_KWARG", "a keyword argument's name"),
        enqueue_on_commit=_database(where, options.get("ENQUEUE_ON_COMMIT")),
        task_modules=_modules(where, options.get("TASK_MODULES", ())))


def queue_option_errors(queues: set[str], backend_options: BackendOptions) -> list[str]:
    """What create_queue would refuse in the options each of ``queues`` (and each queue
    named in QUEUE_OPTIONS) would be created with, one message a queue."""
    found = []
    names = sorted(queues | set(backend_options.per_queue_options), key=str)
    for name in names:
        own = backend_options.per_queue_options.get(name, {})
        try:
            check_options(name, {**backend_options.queue_options, **own})
        except ConfigurationError as error:
            found.append(f"Task queue {name!r}: {error}")
    return found


def _queue_options(where: str, value: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """QUEUE_OPTIONS split: options for every queue, and dicts of a queue's own."""
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise ConfigurationError(f"{where}['QUEUE_OPTIONS'] must be a dict of queue options "
                                 f"(and of dicts by queue name), got {shown_value(value)}.")
    shared = {k: v for k, v in value.items() if not isinstance(v, dict)}
    own = {k: dict(v) for k, v in value.items() if isinstance(v, dict)}
    return shared, own


def _text(where: str, options: dict[str, Any], key: str, what: str) -> str | None:
    value = options.get(key)
    if value is not None and not (isinstance(value, str) and value):
        raise ConfigurationError(f"{where}[{key!r}] must be {what}, got {shown_value(value)}.")
    return value


def _database(where: str, value: Any) -> str | None:
    """ENQUEUE_ON_COMMIT: None (or False), or an alias in DATABASES."""
    if value is None or value is False:
        return None
    if not isinstance(value, str) or value not in settings.DATABASES:
        raise ConfigurationError(
            f"{where}['ENQUEUE_ON_COMMIT'] must name a database in DATABASES (the alias whose "
            f"commit sends the task), got {shown_value(value)}.")
    return value


def _modules(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(
            isinstance(module, str) and module for module in value):
        raise ConfigurationError(f"{where}['TASK_MODULES'] must be a list of module paths, "
                                 f"got {shown_value(value)}.")
    return tuple(value)
