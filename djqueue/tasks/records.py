"""A task run's record: built from its message, finished, and turned into a TaskResult.

A task's message carries what its record needs (path, arguments, backend,
queue, priority); the record is written when a run ends (djqueue.tasks.task_handler)
or when the task is retried or cancelled.
"""

from __future__ import annotations

import dataclasses
import traceback
from datetime import datetime
from functools import lru_cache
from typing import Any

from djqueue.exceptions import TaskDeadLettered, UntrustedTask, shown_value
from djqueue.models import Message, State, TaskRecord, TaskStatus
from djqueue.storage import dialects, fastpath, host_clock, placement
from djqueue.storage.payloads import storable, unstorable
from djqueue.storage.statements import message_inserts
from djqueue.tasks import known_tasks
from djqueue.tasks.compat import Task, TaskError, TaskResult, TaskResultDoesNotExist


def record_id(message: Message) -> str:
    """The result id of a task message: given at enqueue on commit, else its own id, with
    ``@database`` after it when its queue lives on another database than the home one
    (ids are per database: djqueue.storage.placement)."""
    payload = message.payload
    given = payload.get("result_id") or payload.get("task_result_id")
    if given:
        return given
    db = fastpath.database_of(message)
    return str(message.id) if db is None or db == placement.home() else f"{message.id}@{db}"


def result_locations(result_id: str) -> list[tuple[str, int | None]]:
    """Where a task result may be: (database, its message's id if the result id says it)
    pairs, in the order to look. A message id names the home database, ``id@database``
    that database; any other id (given at enqueue on commit) is looked for on each."""
    if unstorable(result_id):  # no record's id: not looked for (PostgreSQL refuses a NUL)
        return []
    number, at, db = result_id.partition("@")
    if at:
        return [(db, int(number))] if is_message_id(number) and db in placement.databases(
            ) else []
    if is_message_id(result_id):
        return [(placement.home(), int(result_id))]
    return [(db, None) for db in placement.databases()]


def no_result(result_id: object) -> TaskResultDoesNotExist:
    """The error for a result id no task result has, showing the id as given (an empty
    one too: Django's own error would read as no message at all)."""
    return TaskResultDoesNotExist(f"No task result has the id {shown_value(result_id)}.")


def is_message_id(text: str) -> bool:
    """Whether ``text`` can be a message id (ASCII digits: ``"²".isdigit()`` is true too)."""
    return text.isascii() and text.isdigit() and len(text) < 19


def record_from_message(message: Message) -> TaskRecord:
    """An unsaved READY record of a task message."""
    payload = message.payload
    if "task_result_id" in payload:  # enqueued before results moved to the message
        # Only the record made for this message: a message naming another task's
        # record id must not run that task or overwrite its record.
        record = TaskRecord.objects.using(dialects.alias()).filter(
            pk=str(payload["task_result_id"])[:64], message_id=message.pk).first()
        if record is None:
            raise UntrustedTask(f"Message {message.pk} names task record "
                                f"{str(payload['task_result_id'])[:64]!r}, which is not its own.")
        return record
    run_after = payload.get("run_after")
    return message_inserts.build(
        TaskRecord, id=record_id(message), task_path=payload["task"], backend=payload["backend"],
        queue_name=message.queue.name, priority=message.priority,
        run_after=datetime.fromisoformat(run_after) if run_after else None,
        args=payload["args"], kwargs=payload["kwargs"], status=TaskStatus.READY,
        enqueued_at=message.sent_at, message_id=message.pk, errors=[], worker_ids=[])


def running_record(message: Message, record: TaskRecord | None = None) -> TaskRecord:
    """The task's record as the message shows it: RUNNING while claimed, with a worker id
    for each delivery (the failed ones are in the message's errors)."""
    record = record or record_from_message(message)
    if message.state == State.CLAIMED:
        record.status = TaskStatus.RUNNING
        record.worker_ids = [*(e.get("worker", "") for e in message.errors or []),
                             message.owner]
        record.last_attempted_at = message.claimed_at
        record.started_at = record.started_at or message.claimed_at
    return record


def pending_record(message: Message, record: TaskRecord | None = None) -> TaskRecord:
    """The record of a task whose message is still there, as a reader sees it:
    :func:`running_record`, and FAILED with TaskDeadLettered if the message was
    dead-lettered before a run ended the task (else it would read READY for ever, and a
    wait for it would never end). Not stored: a redrive makes the task READY again."""
    record = running_record(message, record)
    if message.state != State.DEAD:
        return record
    errors = message.errors or []
    last = errors[-1] if errors else {}
    record.status = TaskStatus.FAILED
    record.worker_ids = [e.get("worker", "") for e in errors]
    record.finished_at = (datetime.fromisoformat(last["at"]) if "at" in last
                          else message.claimed_at or message.sent_at)
    record.errors = [*record.errors, error_entry(TaskDeadLettered.of_message(
        message.pk, message.attempts, errors))]
    return record


def first_run_task(message: Message) -> Task:
    """The Task a claimed first delivery runs, as :func:`first_run_values` holds it."""
    payload = message.payload
    return _task(payload["task"], message.priority, message.queue.name, None,
                 payload["backend"])


def first_run_values(message: Message, task: Task | None = None) -> dict[str, Any]:
    """:func:`result_values` of the RUNNING record of a claimed first delivery whose
    record id is its message's own, straight from the message: what
    :func:`running_record` of :func:`record_from_message` would hold, without the
    model instance, which a run whose record the ack copies never writes. ``task``:
    :func:`first_run_task` of the message, when the caller has it."""
    payload = message.payload
    claimed_at = message.claimed_at
    return {
        "task": task or first_run_task(message),
        "id": str(message.id), "enqueued_at": message.sent_at, "started_at": claimed_at,
        "last_attempted_at": claimed_at, "args": payload["args"], "kwargs": payload["kwargs"],
        "backend": payload["backend"], "status": TaskStatus.RUNNING, "finished_at": None,
        "errors": [], "worker_ids": [message.owner], "_return_value": None}


def error_entry(exc: BaseException, tb: str | None = None) -> dict[str, str]:
    # A character no database stores (a NUL, a lone surrogate) must not lose the failure.
    return {"exception_class_path": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "traceback": storable(tb if tb is not None else "".join(
                traceback.format_exception(exc)))}


#: What a run's end writes to its record (never ``cancel_requested``, which a
#: cancel may have set meanwhile).
FINISHED_FIELDS = ["status", "return_value", "finished_at", "errors", "unique_key",
                   "started_at", "last_attempted_at", "worker_ids"]


def finish(record: TaskRecord, status: str, *, value: Any = None,
           error: BaseException | None = None, tb: str | None = None, save: bool = True) -> None:
    """Record the end of a task run: status, value or error; frees its unique key."""
    if error is not None:
        record.errors = [*record.errors, error_entry(error, tb)]
    record.status = status
    record.return_value = value
    record.finished_at = host_clock.database_now(placement.database_of(record))
    record.unique_key = None
    if save:
        message_inserts.upsert(dialects.alias(), [record], FINISHED_FIELDS)


def load_task(record: TaskRecord) -> Task:
    return _task(record.task_path, record.priority, record.queue_name, record.run_after,
                 record.backend)


@lru_cache(maxsize=4096)
def _task(path: str, priority: int, queue_name: str, run_after: datetime | None,
          backend: str) -> Task:
    task = known_tasks.find(path)  # looked up, never imported: see known_tasks
    return task.using(priority=priority, queue_name=queue_name, run_after=run_after,
                      backend=backend)


def to_task_result(record: TaskRecord, task: Task | None = None, *,
                   from_json: bool = False) -> TaskResult:
    """The TaskResult of ``record``. ``from_json``: its args and kwargs were decoded from
    JSON (a message's payload, a stored record), so they are already what TaskResult's
    ``normalize_json`` would make of them."""
    return result_from(result_values(record, task), from_json=from_json)


def result_values(record: TaskRecord, task: Task | None = None) -> dict[str, Any]:
    """The fields of ``record``'s TaskResult, for :func:`result_from`."""
    return {
        "task": task or load_task(record), "id": record.id,
        "enqueued_at": record.enqueued_at, "started_at": record.started_at,
        "last_attempted_at": record.last_attempted_at, "args": record.args,
        "kwargs": record.kwargs, "backend": record.backend, **_run_end(record)}


def finished_values(started: dict[str, Any], record: TaskRecord) -> dict[str, Any]:
    """:func:`result_values` of a run's record once :func:`finish` ended it, from those
    of its start (a worker makes both results of every run, so it builds the second
    from the first)."""
    return {**started, **_run_end(record)}


def _run_end(record: TaskRecord) -> dict[str, Any]:
    """The TaskResult fields that a run's end (:func:`finish`) changes."""
    return {"status": record.status, "finished_at": record.finished_at,
            "errors": [TaskError(**e) for e in record.errors],
            "worker_ids": list(record.worker_ids),
            "_return_value": record.return_value if record.status == TaskStatus.SUCCESSFUL
            else None}


def result_from(values: dict[str, Any], *, from_json: bool = False) -> TaskResult:
    """A TaskResult of :func:`result_values` (see :func:`to_task_result`)."""
    if from_json and fastpath.verified.enabled and values.keys() == _RESULT_FIELDS:
        return fastpath.frozen_dataclass(TaskResult, values)
    values = dict(values)
    return_value = values.pop("_return_value")
    result: TaskResult = TaskResult(**values)
    object.__setattr__(result, "_return_value", return_value)
    return result


#: TaskResult's fields, as to_task_result sets them without its constructor; if the
#: framework's TaskResult has other fields, the constructor is used.
_RESULT_FIELDS = {f.name for f in dataclasses.fields(TaskResult)}
