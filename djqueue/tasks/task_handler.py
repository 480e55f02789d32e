"""The handler of task queues: runs django.tasks tasks and records their outcome.

A task's record is written once, when its run ends. Under a worker that is a
batch at a time, inside the transaction that acks the finished messages (the
worker's ``in_claim_transaction`` hook): a task's result and its message's ack
commit together, and a task costs no statement of its own. The ack copies a first
run's success from the message row (djqueue.storage.statements.task_record_copy),
so such a run, the common one, builds no record at all (``_run_first``).
Elsewhere (a task message received by hand, or an exactly-once queue whose ack
happens in the handler's own transaction) the run writes its record itself. A
retry writes the record at once (its errors must outlive the delivery). A workflow
step's run settles its step with its record, in the same transaction
(djqueue.tasks.workflow_joins).
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Sequence
from typing import Any, NamedTuple

from django.db import transaction

from djqueue.durations import validate_delay
from djqueue.exceptions import InvalidMessage, Postpone, RetryAfter, TaskCancelled, UntrustedTask
from djqueue.models import FINISHED_STATUSES, Message, State, TaskRecord, TaskStatus
from djqueue.models.message import exception_line
from djqueue.storage import dialects, host_clock
from djqueue.storage.statements import message_inserts, task_record_copy
from djqueue.storage.statements.prepared_values import RowTemplates
from djqueue.tasks import (
    known_tasks,
    step_checks,
    task_calls,
    task_messages,
    task_run_logs,
    workflow_joins,
)
from djqueue.tasks.backend import QueueBackend, task_queue_names
from djqueue.tasks.compat import Task, task_backends, task_finished, task_started
from djqueue.tasks.records import (
    FINISHED_FIELDS,
    error_entry,
    finish,
    finished_values,
    first_run_task,
    first_run_values,
    load_task,
    record_from_message,
    record_id,
    result_from,
    result_values,
    running_record,
    to_task_result,
)
from djqueue.worker import registry


class Finished(NamedTuple):
    """A finished run's record, waiting for the worker's ack."""

    #: The record, written from Python (None: the ack copies it, see ``copied``).
    record: TaskRecord | None = None
    #: Its row as message_inserts.render_row made it (None: the values travel as parameters).
    row: str | None = None
    #: What the run adds to its message's row when the ack copies the record from that
    #: row instead (see djqueue.storage.statements.task_record_copy).
    copied: task_record_copy.RunEnd | None = None
    #: A workflow step's run: the step it settles with the ack (see workflow_joins).
    step: workflow_joins.Settled | None = None


_lock = threading.Lock()
#: Records of finished runs, by message id, until the ack that carries them has committed.
_finished: dict[int, Finished] = {}
#: What the last ack transaction wrote (or dropped, for lost leases), by message id.
_carried: dict[int, Finished] = {}
#: A finished record's row from a template per task, backend, queue, priority and
#: outcome: the values below are all that differ between two runs of one task.
_record_rows = RowTemplates(TaskRecord._meta.label, TaskRecord._meta.concrete_fields, (
    "id", "run_after", "args", "kwargs", "enqueued_at", "started_at", "finished_at",
    "last_attempted_at", "return_value", "errors", "worker_ids", "message_id"))


class RetryTask(RetryAfter):
    """Raised to djqueue so that the message is retried: after the queue's backoff, or
    after the delay of the RetryAfter the task raised."""


def in_claim_transaction(db: str, acks: Sequence[Message], acked: Sequence[Message]) -> None:
    """The worker's hook, inside its ack-and-claim transaction: write the records of the
    acked tasks (a run whose lease was lost is dropped: the task runs again).

    A record is forgotten only once a later transaction no longer carries its ack: the
    worker retries the same acks after a rollback (a deadlock, a connection lost at
    COMMIT), and their records must be written again then.
    """
    ids = {m.id for m in acks}  # a message's pk is its id (read as a plain attribute)
    with _lock:
        for pk, entry in _carried.items():
            if pk not in ids and _finished.get(pk) is entry:  # committed, or dropped
                del _finished[pk]
        _carried.clear()
        _carried.update((pk, _finished[pk]) for pk in ids if pk in _finished)
        done = [entry for entry in map(_carried.get, [m.id for m in acked]) if entry is not None]
    task_record_copy.copy_records(db, [f.copied for f in done if f.copied is not None],
                                  FINISHED_FIELDS)
    written = [(f.record, f.row) for f in done if f.record is not None]
    for start in range(0, len(written), task_record_copy.CHUNK):
        chunk = written[start:start + task_record_copy.CHUNK]
        rows = [row for _, row in chunk if row is not None]
        message_inserts.upsert(db, [record for record, _ in chunk], FINISHED_FIELDS,
                               rendered=rows if len(rows) == len(chunk) else None)
    steps = [f.step for f in done if f.step is not None]
    if steps:  # the workflow join, in the transaction that acks the steps' messages
        workflow_joins.settle(db, steps)


def run_task(message: Message) -> None:
    task_run_logs.recheck()
    db = dialects.alias()
    payload = message.payload
    task_messages.check_shape(message, payload)
    # Under a worker's hook (never on an exactly-once queue: that ack is the run's own
    # transaction), the record waits for the ack; no connection is looked up for it.
    batched = registry.hook_will_run()
    if batched and _is_first_run(db, message, payload):
        _run_first(db, message, payload)
        return
    record = _record(db, message, payload)
    sender = task_messages.serving_backend(message, record.backend)
    if record.status in FINISHED_STATUSES:
        return  # a repeated delivery of a finished task
    task = load_task(record)
    if record.cancel_requested:
        _finish(db, message, record, batched, TaskStatus.FAILED,
                error=TaskCancelled("Cancelled before it started."))
        task_finished.send(sender=sender,
                           task_result=to_task_result(record, task, from_json=True))
        return
    args: list[Any] = list(record.args)
    kwargs: dict[str, Any] = record.kwargs
    if workflow_joins.PAYLOAD_KEY in payload:
        prepared = step_checks.before_run(db, message, args, kwargs)
        if prepared is None:
            _finish(db, message, record, batched, TaskStatus.FAILED, error=TaskCancelled(
                "Not started: its workflow was cancelled or failed meanwhile."))
            return
        args, kwargs = prepared.args, prepared.kwargs
    values = result_values(record, task)
    unheard = task_run_logs.runs_unheard(sender)
    result = None if unheard and not task.takes_context else result_from(values, from_json=True)
    if not unheard:
        task_started.send(sender=sender, task_result=result)
    try:
        value = task_calls.call(task, args, kwargs, result)
    except Exception as exc:
        _failed(db, message, record, batched, task, _run_error(exc))
        _send_finished(sender, finished_values(values, record))  # in the except block
        return
    _finish(db, message, record, batched, TaskStatus.SUCCESSFUL, value=value)
    if not unheard:
        _send_finished(sender, finished_values(values, record))


def _send_finished(sender: type, finished: dict[str, Any]) -> None:
    """``task_finished`` with a run's result. A failed run's is sent in its except
    block, as Django's receiver expects: it logs the run at ERROR with the traceback it
    reads from sys.exc_info()."""
    task_finished.send(sender=sender, task_result=result_from(finished, from_json=True))


def _is_first_run(db: str, message: Message, payload: dict[str, Any]) -> bool:
    """Whether this claimed delivery is a task's first run whose success the ack can
    copy from its message's row: the common run, served by :func:`_run_first`.

    The record's id must be the message's own (:func:`record_id`, the rule the ack's
    :func:`task_record_copy.copies` applies): a result id given at enqueue, or an older
    message's ``task_result_id``, takes the path that looks that record up and checks it."""
    return (message.state == State.CLAIMED and workflow_joins.PAYLOAD_KEY not in payload
            and task_record_copy.copyable_message(db, message)
            and record_id(message) == str(message.id))


def _run_first(db: str, message: Message, payload: dict[str, Any]) -> None:
    """A task's first run, under a worker whose ack copies its record from the message's
    row when it succeeds: its results are made straight from the message, and a record
    is built only if it fails (then as by :func:`run_task`).

    Why: a record built and finished only to be dropped by the ack was a share of a
    django.tasks worker's time (docs/performance.md), in a process bound by the GIL."""
    sender = task_messages.serving_backend(message, payload["backend"])
    task = first_run_task(message)
    # Where a successful run's signals would do nothing, they are not sent, and the
    # results nobody reads are not made (task_run_logs.runs_unheard).
    unheard = task_run_logs.runs_unheard(sender)
    values = None if unheard and not task.takes_context else first_run_values(message, task)
    result = None if values is None else result_from(values, from_json=True)
    if not unheard:
        task_started.send(sender=sender, task_result=result)
    try:
        value = task_calls.call(task, list(payload["args"]), payload["kwargs"], result)
    except Exception as exc:
        error = _run_error(exc)
        record = running_record(message, record_from_message(message))
        _failed(db, message, record, True, task, error)
        _send_finished(sender, finished_values(values or first_run_values(message, task), record))
        return
    run = task_record_copy.RunEnd(message.id, host_clock.database_now(db), value)
    with _lock:
        _finished[message.id] = Finished(copied=run)
    if unheard or values is None:  # (values is None only when unheard)
        return
    _send_finished(sender, {**values, "status": TaskStatus.SUCCESSFUL, "finished_at":
                            run.finished_at, "worker_ids": [message.owner], "_return_value": value})


def _run_error(exc: Exception) -> Exception:
    """The error a run that raised ``exc`` fails with. A Postpone is raised again, for
    the worker to give the message back (the task stays READY), unless its delay is out
    of bounds: then the task fails as for any error (its result says why), rather than
    only its message's delivery, which would leave the result READY for ever."""
    if not isinstance(exc, Postpone):
        return exc
    try:
        validate_delay(exc.delay)
    except InvalidMessage as bad:
        invalid = InvalidMessage(f"Postpone asked for an invalid delay: {bad}")
        invalid.__cause__ = exc
        return invalid
    raise exc


def _failed(db: str, message: Message, record: TaskRecord, batched: bool,
            task: Task, exc: Exception) -> None:
    """A run raised ``exc``: RetryTask, once its error is written, if the backend retries
    the task; else the record ends FAILED."""
    tb = "".join(traceback.format_exception(exc))
    backend = task_backends[record.backend]
    if isinstance(backend, QueueBackend) and backend.should_retry(
            task, len(record.worker_ids), exc):
        record.errors = [*record.errors, error_entry(exc, tb)]
        record.status = TaskStatus.READY
        message_inserts.upsert(db, [record], FINISHED_FIELDS)
        raise RetryTask(backend.retry_delay(task, len(record.worker_ids), message, exc),
                        f"{record.task_path} raised {exception_line(tb)}") from exc
    _finish(db, message, record, batched, TaskStatus.FAILED, error=exc, tb=tb)


def _record(db: str, message: Message, payload: dict[str, Any]) -> TaskRecord:
    """The RUNNING record of this delivery. A first delivery has none stored; a retried
    or cancelled task, or one enqueued on commit, has. Only the message's own record:
    one made for another message is never run or overwritten (UntrustedTask)."""
    stored = None
    if message.attempts > 1 or "task" not in payload or "result_id" in payload:
        stored = TaskRecord.objects.using(db).filter(pk=record_id(message)).first()
        if stored is not None and stored.message_id != message.pk:
            raise UntrustedTask(f"Message {message.pk} names task record "
                                f"{record_id(message)!r}, which is not its own.")
    return running_record(message, stored or record_from_message(message))


def _finish(db: str, message: Message, record: TaskRecord, batched: bool,
            status: str, **outcome: Any) -> None:
    """Record the end of the run: with the worker's next ack when batched, else now."""
    ref = step_checks.reference(message)
    if not batched:
        with transaction.atomic(using=db):
            finish(record, status, **outcome)
            if ref is not None:  # the join, with the record (an exactly-once queue: and the ack)
                workflow_joins.settle(db, [workflow_joins.settled_from(message.pk, ref, record)])
        return
    finish(record, status, save=False, **outcome)
    step = None if ref is None else workflow_joins.settled_from(message.pk, ref, record)
    if task_record_copy.copies(db, message, record):
        assert record.finished_at is not None, "finish() stamps it"
        entry = Finished(copied=task_record_copy.RunEnd(
            message.pk, record.finished_at, record.return_value), step=step)
    else:
        entry = Finished(record, message_inserts.render_row(db, record, _record_rows), step=step)
    with _lock:
        _finished[message.pk] = entry


class TaskHandlers:
    """The worker's handler source for the queues of every configured QueueBackend
    (see djqueue.worker.registry); djqueue's AppConfig adds it when the app loads."""

    def queue_names(self) -> set[str]:
        return task_queue_names()

    def handler(self, queue: str) -> registry.Handler:
        known_tasks.discover()  # as the worker starts: the project's task modules, once
        return registry.Handler(run_task, in_claim_transaction=in_claim_transaction)


task_handlers = TaskHandlers()
