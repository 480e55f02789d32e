"""Operations on one task by its result id: cancel it, read the progress and the
log records its runs reported; and waiting for a result to finish.

A pending task lives as its message (the result id names it, or the READY record
written at commit names it); a finished one as its
:class:`~djqueue.models.TaskRecord`. Each operation looks on every database a result
id may live on (records.result_locations).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from djqueue.api.message_reports import get_logs, get_progress
from djqueue.api.queue_operations import delete
from djqueue.exceptions import NotFinished, TaskCancelled
from djqueue.models import (
    FINISHED_STATUSES,
    Message,
    MessageLog,
    MessageProgress,
    TaskRecord,
    TaskStatus,
)
from djqueue.polling import apoll_until, poll_until
from djqueue.storage import dialects
from djqueue.storage.statements import message_inserts
from djqueue.storage.unreadable_rows import first_row
from djqueue.tasks.compat import TaskResult
from djqueue.tasks.records import (
    FINISHED_FIELDS,
    finish,
    no_result,
    result_locations,
    running_record,
)


def cancel(result_id: str) -> bool:
    """Cancel a task: a READY one is failed with TaskCancelled at once and never runs;
    a RUNNING one gets ``cancel_requested`` set, which it can check through
    :func:`cancel_requested`. False if the task had already finished.
    """
    for db, message_id in result_locations(str(result_id)):
        with dialects.using(db):
            cancelled = _cancel(db, str(result_id), message_id)
        if cancelled is not None:
            return cancelled
    raise no_result(result_id)


def _cancel(db: str, result_id: str, message_id: int | None) -> bool | None:
    """cancel() on one database: None if the task is not there."""
    with transaction.atomic(using=db):
        record = TaskRecord.objects.using(db).select_for_update().filter(pk=result_id).first()
        if record is not None and record.status in FINISHED_STATUSES:
            return False
        message = pending_message(db, record.message_id if record else message_id, lock=True)
        if message is not None:
            record = running_record(message, record)
        if record is None:
            return None
        record.cancel_requested = True
        if record.status == TaskStatus.READY and record.message_id is not None and (
                delete(message or record.message_id, only_unclaimed=True)):
            finish(record, TaskStatus.FAILED, error=TaskCancelled("Cancelled before it started."),
                   save=False)
        # A running task's record is written at its end, which keeps the flag.
        message_inserts.upsert(db, [record], ["cancel_requested", *FINISHED_FIELDS])
    return True


def pending_message(db: str, message_id: int | None, lock: bool = False) -> Message | None:
    """A task's message, if it is still pending (its time None if a hand edit left it
    unreadable, as djqueue.storage.unreadable_rows.first_row reads it)."""
    if message_id is None:
        return None
    query = Message.objects.using(db).filter(pk=message_id)
    message = first_row(query.select_for_update() if lock else query)
    if message is None or not isinstance(message.payload, dict) or not (
            "task" in message.payload or "task_result_id" in message.payload):
        return None
    return message


def cancel_requested(context: Any) -> bool:
    """Whether cancellation of the running task was requested (pass the TaskContext)."""
    return TaskRecord.objects.using(dialects.alias()).filter(
        pk=context.task_result.id, cancel_requested=True).exists()


def task_progress(result_id: str) -> MessageProgress | None:
    """The progress a task reported (``djqueue.report_progress()`` inside it), by its
    result id; None if it reported none (or the id is unknown)."""
    found = _task_message(result_id)
    if found is None:
        return None
    with dialects.using(found[0]):
        return get_progress(found[1])


def task_logs(result_id: str) -> list[MessageLog]:
    """The log records kept from a task's runs, by its result id, oldest first."""
    found = _task_message(result_id)
    if found is None:
        return []
    with dialects.using(found[0]):
        return get_logs(found[1])


#: The longest pause, in seconds, between two reads of a result a wait makes.
WAIT_INTERVAL = 0.2


def wait_for_result(result: TaskResult, timeout: float | None = None, *,
                    interval: float = WAIT_INTERVAL) -> TaskResult:
    """Wait until ``result``'s task has finished, SUCCESSFUL or FAILED, and return
    ``result``, refreshed (Celery's ``AsyncResult.get()``, without raising the task's
    error: read ``status``, ``return_value`` and ``errors``).

    It reads the result at once, then after pauses that double from ``POLL_MIN`` up to
    ``interval`` seconds: a finished task is seen at most ``interval`` late, at one or
    two primary-key reads a look. NotFinished after ``timeout`` seconds (None: no end);
    the task goes on. A web request that waits holds its worker: keep timeouts short."""
    if not poll_until(lambda: _refreshed(result).is_finished, timeout, interval):
        raise _not_finished(result, timeout)
    return result


async def await_for_result(result: TaskResult, timeout: float | None = None, *,
                           interval: float = WAIT_INTERVAL) -> TaskResult:
    """:func:`wait_for_result` for async code: it reads with ``result.arefresh()`` and
    pauses with ``asyncio.sleep``, so the event loop goes on meanwhile."""
    async def finished() -> bool:
        await result.arefresh()
        return result.is_finished

    if not await apoll_until(finished, timeout, interval):
        raise _not_finished(result, timeout)
    return result


def _refreshed(result: TaskResult) -> TaskResult:
    result.refresh()
    return result


def _not_finished(result: TaskResult, timeout: float | None) -> NotFinished:
    return NotFinished(f"Task result {result.id} had not finished after {timeout:g} s "
                       f"(it is {result.status}).")


def _task_message(result_id: str) -> tuple[str, int] | None:
    """A task run's database and message id: its record's, or the one the result id
    names before the record exists (a first run's record is written when it ends)."""
    if not isinstance(result_id, str):
        raise TypeError(f"a task result id is text, got {type(result_id).__name__}")
    for db, message_id in result_locations(result_id):
        stored = TaskRecord.objects.using(db).filter(pk=result_id[:36]).values_list(
            "message_id", flat=True).first()
        if stored is not None:
            return db, stored
        if message_id is not None:
            return db, message_id
    return None
