"""The handler of task queues: runs django.tasks tasks and records their outcome.

A task's record is written once, when its run ends. Under a worker that is a
batch at a time, inside the transaction that acks the finished messages (the
worker's ``in_claim_transaction`` hook): a task's result and its message's ack
commit together, and a task costs no statement of its own; on MariaDB the ack
copies a first run's success from the message row (djqueue.storage.statements.task_record_copy).
Elsewhere (a task message received by hand, or an exactly-once queue whose ack
happens in the handler's own transaction) the run writes its record itself. A
retry writes the record at once (its errors must outlive the delivery). A workflow
step's run settles its step with its record, in the same transaction
(djqueue.tasks.workflow_joins).
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.dispatch import receiver

from djqueue.exceptions import TaskCancelled, TaskTimeout, UntrustedTask
from djqueue.models import FINISHED_STATUSES, Message, TaskRecord, TaskStatus
from djqueue.storage import dialects, fastpath
from djqueue.storage.statements import message_inserts, task_record_copy
from djqueue.storage.statements.prepared_values import RowTemplates
from djqueue.tasks import known_tasks, step_checks, workflow_joins
from djqueue.tasks.backend import QueueBackend, QueueTask, task_queue_names
from djqueue.tasks.compat import TaskContext, normalize_json, task_backends, task_finished, task_started
from djqueue.tasks.records import (
    FINISHED_FIELDS,
    error_entry,
    finish,
    finished_values,
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

    record: TaskRecord
    #: Its row as message_inserts.render_row made it (None: the values travel as parameters).
    row: str | None = None
    #: The ack copies it from the message's row instead (see djqueue.storage.statements.task_record_copy).
    copied: bool = False
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


class RetryTask(Exception):
    """Raised to djqueue so that the message is retried with the queue's backoff."""


def in_claim_transaction(db: str, acks: Sequence[Message], acked: Sequence[Message]) -> None:
    """The worker's hook, inside its ack-and-claim transaction: write the records of the
    acked tasks (a run whose lease was lost is dropped: the task runs again).

    A record is forgotten only once a later transaction no longer carries its ack: the
    worker retries the same acks after a rollback (a deadlock, a connection lost at
    COMMIT), and their records must be written again then.
    """
    ids = {m.pk for m in acks}
    with _lock:
        for pk, entry in _carried.items():
            if pk not in ids and _finished.get(pk) is entry:  # committed, or dropped
                del _finished[pk]
        _carried.clear()
        _carried.update((pk, _finished[pk]) for pk in ids if pk in _finished)
        done = [_carried[m.pk] for m in acked if m.pk in _carried]
    task_record_copy.copy_records(db, [f.record for f in done if f.copied], FINISHED_FIELDS)
    written = [f for f in done if not f.copied]
    for start in range(0, len(written), task_record_copy.CHUNK):
        chunk = written[start:start + task_record_copy.CHUNK]
        rendered = [f.row for f in chunk]
        message_inserts.upsert(db, [f.record for f in chunk], FINISHED_FIELDS,
                    rendered=None if None in rendered else rendered)
    steps = [f.step for f in done if f.step is not None]
    if steps:  # the workflow join, in the transaction that acks the steps' messages
        workflow_joins.settle(db, steps)


def is_task(message: Message) -> bool:
    return _is_task_payload(message.payload)


def _is_task_payload(payload: Any) -> bool:
    return isinstance(payload, dict) and ("task" in payload or "task_result_id" in payload)


def run_task(message: Message) -> None:
    db = dialects.alias()
    payload = message.payload
    _check_task_message(message, payload)
    record = _record(db, message, payload)
    sender = _serving_backend(message, record.backend)
    if record.status in FINISHED_STATUSES:
        return  # a repeated delivery of a finished task
    conn = connections[db]
    batched = registry.hook_will_run() and not conn.in_atomic_block
    task = load_task(record)
    if record.cancel_requested:
        _finish(conn, message, record, batched, TaskStatus.FAILED,
                error=TaskCancelled("Cancelled before it started."))
        task_finished.send(sender=sender,
                           task_result=to_task_result(record, task, from_json=True))
        return
    args: list[Any] = list(record.args)
    kwargs: dict[str, Any] = record.kwargs
    if workflow_joins.PAYLOAD_KEY in payload:
        prepared = step_checks.before_run(db, message, args, kwargs)
        if prepared is None:
            _finish(conn, message, record, batched, TaskStatus.FAILED, error=TaskCancelled(
                "Not started: its workflow was cancelled or failed meanwhile."))
            return
        args, kwargs = prepared.args, prepared.kwargs
    values = result_values(record, task)
    result = result_from(values, from_json=True)
    task_started.send(sender=sender, task_result=result)
    if task.takes_context:
        args.insert(0, TaskContext(task_result=result))
    timeout = task.timeout if isinstance(task, QueueTask) else None
    call = fastpath.sync_function(task.func) or task.call
    try:
        value = normalize_json(call_with_timeout(lambda: call(*args, **kwargs), timeout))
    except Exception as exc:
        tb = "".join(traceback.format_exception(exc))
        backend = task_backends[record.backend]
        if isinstance(backend, QueueBackend) and backend.should_retry(
                task, len(record.worker_ids), exc):
            record.errors = [*record.errors, error_entry(exc, tb)]
            record.status = TaskStatus.READY
            message_inserts.upsert(db, [record], FINISHED_FIELDS)
            raise RetryTask(f"{record.task_path} failed; retrying") from exc
        _finish(conn, message, record, batched, TaskStatus.FAILED, error=exc, tb=tb)
    else:
        _finish(conn, message, record, batched, TaskStatus.SUCCESSFUL, value=value)
    task_finished.send(sender=sender,
                       task_result=result_from(finished_values(values, record), from_json=True))


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


#: A task message's fields and their types (``task_result_id``: older messages).
_FIELDS = {"task": str, "backend": str, "args": list, "kwargs": dict, "run_after": str,
           "result_id": str, "task_result_id": str, "workflow": list}


def _check_task_message(message: Message, payload: Any) -> None:
    """Refuse (UntrustedTask, so the message is dead-lettered) a message that is not a
    task message of a djqueue backend serving its queue."""
    if not _is_task_payload(payload):
        raise UntrustedTask(f"Message {message.pk} on task queue {message.queue.name!r} is "
                            "not a task message.")
    wrong = [name for name, value in payload.items()
             if name in _FIELDS and not isinstance(value, _FIELDS[name])]
    if "task_result_id" not in payload:
        wrong += [name for name in ("task", "backend", "args", "kwargs") if name not in payload]
    if wrong:
        raise UntrustedTask(f"Message {message.pk} is not a well-formed task message "
                            f"(fields {', '.join(sorted(set(wrong)))}).")


#: The class of each djqueue backend, by (alias, queue), for the queues it serves: the
#: TASKS setting alone decides it, so a worker works it out once a pair, not once a task
#: (and again when the setting changes, as tests do). Only pairs that passed are kept.
_serving: dict[tuple[str, str], type[QueueBackend]] = {}


def _serving_backend(message: Message, alias: str) -> type[QueueBackend]:
    """The class of the djqueue backend ``alias`` (the sender of the task signals), which
    must serve the message's queue; else UntrustedTask (the message is dead-lettered)."""
    queue = message.queue.name
    try:
        return _serving[alias, queue]
    except KeyError:
        pass
    backend = task_backends[alias] if alias in (getattr(settings, "TASKS", {}) or {}) else None
    if not isinstance(backend, QueueBackend) or queue not in backend.queues:
        raise UntrustedTask(f"Message {message.pk} names backend {str(alias)[:100]!r}, which "
                            f"is not a djqueue backend serving queue {queue!r}.")
    _serving[alias, queue] = type(backend)
    return type(backend)


@receiver(setting_changed)
def _forget_backends(*, setting: str, **kwargs: Any) -> None:
    if setting == "TASKS":
        _serving.clear()


def _finish(conn: BaseDatabaseWrapper, message: Message, record: TaskRecord, batched: bool,
            status: str, **outcome: Any) -> None:
    """Record the end of the run: with the worker's next ack when batched, else now."""
    db = conn.alias
    ref = step_checks.reference(message)
    if not batched:
        with transaction.atomic(using=db):
            finish(record, status, **outcome)
            if ref is not None:  # the join, with the record (an exactly-once queue: and the ack)
                workflow_joins.settle(db, [workflow_joins.settled_from(message.pk, ref, record)])
        return
    finish(record, status, save=False, **outcome)
    step = None if ref is None else workflow_joins.settled_from(message.pk, ref, record)
    if task_record_copy.copies(conn, message, record):
        entry = Finished(record, copied=True, step=step)
    else:
        entry = Finished(record, message_inserts.render_row(db, record, _record_rows), step=step)
    with _lock:
        _finished[message.pk] = entry


def call_with_timeout(call: Callable[[], Any], timeout: float | None) -> Any:
    """Run ``call``; past ``timeout`` seconds raise TaskTimeout and stop waiting for it.

    Python cannot stop a thread: a timed-out task keeps running in a daemon
    thread until it returns by itself (its result is discarded), while the
    worker's slot is freed and the task is marked FAILED.
    """
    if timeout is None:
        return call()
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            connections.close_all()
            done.set()

    threading.Thread(target=target, name="djqueue-task", daemon=True).start()
    if not done.wait(timeout):
        raise TaskTimeout(f"Task ran past its timeout of {timeout:g}s.")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]



class TaskHandlers:
    """The worker's handler source for the queues of every configured QueueBackend
    (see djqueue.worker.registry); djqueue's AppConfig adds it when the app loads."""

    def queue_names(self) -> set[str]:
        return task_queue_names()

    def handler(self, queue: str) -> registry.Handler:
        known_tasks.discover()  # as the worker starts: the project's task modules, once
        return registry.Handler(run_task, in_claim_transaction=in_claim_transaction)


task_handlers = TaskHandlers()
