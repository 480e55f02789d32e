"""A ``django.tasks`` backend that runs tasks on djqueue's workers.

    TASKS = {"default": {"BACKEND": "djqueue.backend.QueueBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"MAX_ATTEMPTS": 3, "RETRY_ON": ["smtplib.SMTPException"],
                                     "QUEUE_OPTIONS": {"visibility_timeout": 300}}}}

Each task queue is a djqueue queue of the same name (created on first use).
Enqueueing is one send: the message carries the task (path, arguments, backend)
and its id is the result id. While the task is pending ``get_result`` reads the
message: READY, or RUNNING while claimed (its worker ids are the owners of the
failed deliveries, from the message's errors, and the current owner). The
:class:`~djqueue.models.TaskRecord` is written when the run ends, with the ack
(see djqueue.tasks.task_handler), or when it is retried or cancelled.
With ``ENQUEUE_ON_COMMIT`` the result id is a UUID given at once, and a READY
record is written with the message at commit.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.checks import CheckMessage, Error
from django.db import transaction

from djqueue import durations
from djqueue.api.message_checks import encode_payload, holds_json_nul
from djqueue.api.queues import LIMIT_FIELDS, create_queue, set_limits
from djqueue.api.sending import send
from djqueue.exceptions import InvalidMessage, QueueNotFound, RetryAfter, TaskCancelled
from djqueue.models import (
    FINISHED_STATUSES,
    Message,
    Queue,
    TaskRecord,
)
from djqueue.storage import fastpath, host_clock, placement
from djqueue.storage.queue_lookup import get_queue, get_queue_by_id
from djqueue.storage.unreadable_rows import first_row
from djqueue.tasks import known_tasks, workflow_joins
from djqueue.tasks.backend_options import queue_option_errors, read_options
from djqueue.tasks.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    task_backends,
    task_enqueued,
)
from djqueue.tasks.records import (
    no_result,
    pending_record,
    record_from_message,
    record_id,
    result_locations,
    to_task_result,
)

# cancel and cancel_requested: documented under this module's name too (docs/tasks.md).
from djqueue.tasks.task_operations import cancel, cancel_requested, pending_message  # noqa: F401
from djqueue.tasks.task_options import check_task, retry_classes

#: The longest group key (the column's width).
GROUP_KEY_CHARS = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueTask(Task):
    """A task with djqueue's options, given as ``@task(...)`` keywords (Django >= 6.1).

    ``max_attempts`` and ``retry_on`` (exception classes or dotted paths)
    override the backend's OPTIONS; ``timeout`` is in seconds; ``unique_key``
    is True (one pending run per argument set), a string, or a callable of the
    task's arguments returning a string. ``group_key`` names the keyword argument
    whose value is the run's group key (per-key limits, ordered queues), or is a
    callable of the task's arguments returning it; it overrides the backend's
    ``GROUP_KEY_KWARG``. ``expires``: seconds after a run is due (its enqueue, or its
    ``run_after``) by which it must have started; a run not started by then is never
    started, and its result reads FAILED with TaskDeadLettered (Celery's ``expires``).
    ``backoff``: seconds before each retry of this task (a list or tuple; the last step
    repeats), lengthened by its queue's ``retry_jitter``, instead of the queue's backoff.
    """

    max_attempts: int | None = None
    retry_on: tuple[Any, ...] = ()
    timeout: float | None = None
    unique_key: bool | str | Callable[..., str] | None = None
    group_key: str | Callable[..., Any] | None = None
    expires: float | None = None
    backoff: tuple[float, ...] | list[float] | None = None

    def key_for(self, args: Any, kwargs: Any) -> str | None:
        key = self.unique_key
        if key is None or key is False:
            return None
        if key is True:
            key = json.dumps([args, kwargs], sort_keys=True, separators=(",", ":"))
        elif callable(key):
            key = str(key(*args, **kwargs))
        return hashlib.sha256(f"{self.module_path}|{key}".encode()).hexdigest()


class QueueBackend(BaseTaskBackend):
    task_class = QueueTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        #: Its OPTIONS, checked and read (ConfigurationError for a bad one): QUEUE_OPTIONS
        #: for every queue it creates and, by a queue's name, that queue's own (its
        #: limits, say); ENQUEUE_ON_COMMIT defers an enqueue to the commit of the
        #: transaction on that alias, for projects whose djqueue DATABASE is not the one
        #: they write to; TASK_MODULES, imported as a worker starts (known_tasks).
        self.backend_options = read_options(alias, self.options)
        self._limits_applied: set[str] = set()

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """Django's system check of this backend: the options each of its queues would be
        created with (djqueue.E007)."""
        return [Error(text, id="djqueue.E007", obj=f"TASKS[{self.alias!r}]")
                for text in queue_option_errors(self.queues, self.backend_options)]

    def validate_task(self, task: Task) -> None:
        check_task(task)  # each option's type, before Django's checks compare them
        super().validate_task(task)
        known_tasks.remember(task)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        joining = workflow_joins.current_batch.get()
        if joining is not None:  # inside ``with djqueue.batch(...)``: a member of it
            return joining.add(task, args, kwargs)
        payload: dict[str, Any] = {"task": task.module_path, "backend": self.alias,
                                   "args": list(args), "kwargs": dict(kwargs)}
        if task.run_after is not None:
            payload["run_after"] = task.run_after.isoformat()
        try:
            body = encode_payload(payload)
        except InvalidMessage as exc:
            raise InvalidTask(f"Task arguments must be JSON-serialisable: {exc}") from None
        if holds_json_nul(body):
            raise InvalidTask("Task arguments contain a NUL character (\\x00), which the "
                              "task's record (a JSON column) cannot store.")
        queue = self.ensure_queue(task.queue_name)
        key = task.key_for(args, kwargs) if isinstance(task, QueueTask) else None
        group_key = self.group_key_for(task, args, kwargs)
        if self.backend_options.enqueue_on_commit:
            payload["result_id"] = str(uuid.uuid4())
            transaction.on_commit(lambda: self._send(queue, task, payload, key, group_key),
                                  using=self.backend_options.enqueue_on_commit)
            enqueued_at = host_clock.database_now(placement.database_of(queue))
            return to_task_result(TaskRecord(
                id=payload["result_id"], task_path=task.module_path, backend=self.alias,
                queue_name=task.queue_name, priority=task.priority, run_after=task.run_after,
                args=payload["args"], kwargs=payload["kwargs"], enqueued_at=enqueued_at), task)
        return self._send(queue, task, payload, key, group_key)

    def group_key_for(self, task: Task, args: Any, kwargs: Any) -> str | None:
        """The run's group key: the value of the keyword argument the task (or the
        backend's GROUP_KEY_KWARG) names, or what the task's callable returns."""
        source = task.group_key if isinstance(task, QueueTask) and task.group_key else (
            self.backend_options.group_key_kwarg)
        if source is None:
            return None
        value = source(*args, **kwargs) if callable(source) else kwargs.get(source)
        if value is None:
            return None
        text = str(value)
        if not 0 < len(text) <= GROUP_KEY_CHARS:
            origin = source if isinstance(source, str) else "the task's group_key"
            raise InvalidTask(f"A group key is 1 to {GROUP_KEY_CHARS} characters, got "
                              f"{len(text)} from {origin}.")
        return text

    def _send(self, queue: Any, task: Task, payload: dict[str, Any], key: str | None,
              group_key: str | None = None) -> TaskResult:
        db = placement.database_of(queue)
        with transaction.atomic(using=db) if "result_id" in payload else nullcontext():
            message = send(queue, payload, delay=task.run_after, priority=task.priority,
                           dedup_key=key, group_key=group_key,
                           expires=getattr(task, "expires", None))
            if message.duplicate:  # a pending run with this unique key
                return self.get_result(record_id(message) if isinstance(message, Message)
                                       else str(message.pk))
            assert isinstance(message, Message), "a send that is no duplicate is a new message"
            if "result_id" in payload:
                record_from_message(message).save(using=db, force_insert=True)
        result = to_task_result(record_from_message(message), task)
        task_enqueued.send(sender=type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        if not isinstance(result_id, str):  # an int (a message id) reads as its digits
            if isinstance(result_id, bool) or not isinstance(result_id, int) or (
                    result_id.bit_length() > 64):
                raise no_result(result_id)
            result_id = str(result_id)
        for db, message_id in result_locations(result_id):
            # A time a hand edit left unreadable is None in the result (first_row).
            records = TaskRecord.objects.using(db).filter(pk=result_id)
            record = first_row(records)
            if record is None or record.status not in FINISHED_STATUSES:
                message = pending_message(db, record.message_id if record else message_id)
                # No message: it may have finished between the two reads (the record
                # came with its ack), so read the record again.
                record = pending_record(message, record) if message else first_row(records)
            if record is not None:
                return to_task_result(record)
        raise no_result(result_id)

    def ensure_queue(self, name: str) -> Queue:
        """The task queue ``name``, created with QUEUE_OPTIONS if missing. The limits that
        QUEUE_OPTIONS names for it are applied to an existing queue once per process,
        so a limit changed in settings holds after a deploy."""
        own = self.backend_options.per_queue_options.get(name, {})
        try:
            queue = get_queue(name)
        except QueueNotFound:
            queue = create_queue(name, exist_ok=True, **{**self.backend_options.queue_options, **own})
        if name not in self._limits_applied:
            self._limits_applied.add(name)
            limits = {k: v for k, v in own.items() if k in LIMIT_FIELDS}
            if any(getattr(queue, k) != v for k, v in limits.items()):
                queue = set_limits(queue, **limits)
        return queue

    @staticmethod
    def retry_delay(task: Task, runs: int, message: Message,
                    exc: BaseException) -> float | timedelta | None:
        """Seconds (or a timedelta) before the retry of a task's failed run number ``runs``:
        a RetryAfter's delay, else its own ``backoff`` step lengthened by its queue's jitter, else None
        (the queue's backoff)."""
        if isinstance(exc, RetryAfter):
            return exc.delay
        steps = getattr(task, "backoff", None)
        if not steps:
            return None
        queue = get_queue_by_id(message.queue_id, fastpath.database_of(message))
        return durations.stepped_delay(steps, runs, queue.retry_jitter).total_seconds()

    def should_retry(self, task: Task, attempts: int, exc: BaseException) -> bool:
        max_attempts = self.backend_options.max_attempts
        retry_on = self.backend_options.retry_on
        if isinstance(task, QueueTask):
            max_attempts = task.max_attempts or max_attempts
            if task.retry_on:
                retry_on = retry_classes(tuple(task.retry_on))
        if attempts >= max_attempts or isinstance(exc, TaskCancelled):
            return False
        return not retry_on or isinstance(exc, (RetryAfter, *retry_on))


def task_queue_names() -> set[str]:
    """Queue names of every configured QueueBackend."""
    from django.conf import settings

    names: set[str] = set()
    for alias, params in getattr(settings, "TASKS", {}).items():
        backend = task_backends[alias]
        if isinstance(backend, QueueBackend):
            names |= set(params.get("QUEUES") or ["default"])
    return names
