"""The handler of task queues: runs django.tasks tasks and records their outcome.

A task's state is written in the worker's own transactions, a batch at a time:
the transaction that claims a batch marks its tasks RUNNING (one upsert), and
the one that acks finished messages writes their results (one upsert) — so a
task's result and its message's ack commit together, and a task costs no
statement of its own. Outside a worker (a task message received by hand, or an
exactly-once queue whose ack happens in the handler's transaction) each task
writes its own state.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections
from django.utils import timezone

from djqueue import rows, vendor
from djqueue.backend import (
    FINISHED_FIELDS,
    QueueBackend,
    QueueTask,
    error_entry,
    finish,
    load_task,
    record_from_message,
    record_id,
    to_task_result,
)
from djqueue.exceptions import TaskCancelled, TaskTimeout
from djqueue.models import FINISHED_STATUSES, Message, TaskRecord, TaskStatus
from djqueue.tasks_compat import TaskContext, normalize_json, task_backends, task_finished, task_started

_lock = threading.Lock()
#: Records marked RUNNING by a claim, by message id, until their handler takes them.
_started: dict[int, TaskRecord] = {}
#: Records of finished runs, by message id, until the ack that carries them.
_finished: dict[int, TaskRecord] = {}
_RUNNING_FIELDS = ["status", "started_at", "last_attempted_at", "worker_ids"]


class RetryTask(Exception):
    """Raised to djqueue so that the message is retried with the queue's backoff."""


def in_claim_transaction(db: str, acks: Sequence[Message], acked: Sequence[Message],
                         claimed: Sequence[Message]) -> None:
    """The worker's hook, inside its ack-and-claim transaction: write the results of the
    acked tasks and mark the claimed ones RUNNING."""
    with _lock:
        done = [_finished.pop(m.pk) for m in acked if m.pk in _finished]
        for message in acks:  # a lost lease: the run is discarded, the task runs again
            _finished.pop(message.pk, None)
    _upsert(db, done, FINISHED_FIELDS)
    started = start(db, claimed)
    with _lock:
        _started.update(started)


def start(db: str, messages: Sequence[Message]) -> dict[int, TaskRecord]:
    """Mark the tasks of ``messages`` RUNNING (one upsert); their records by message id."""
    messages = [m for m in messages if is_task(m)]
    if not messages:
        return {}
    now = timezone.now()
    # A first delivery has no record yet; a redelivery, or a task enqueued on commit, has.
    known = [record_id(m) for m in messages if m.attempts > 1 or "result_id" in m.payload]
    existing = TaskRecord.objects.using(db).in_bulk(known) if known else {}
    records = {}
    for message in messages:
        record = existing.get(record_id(message)) or record_from_message(message)
        if record.status not in FINISHED_STATUSES:
            record.status = TaskStatus.RUNNING
            record.started_at = record.started_at or now
            record.last_attempted_at = now
            record.worker_ids = [*record.worker_ids, message.owner]
        records[message.pk] = record
    _upsert(db, [r for r in records.values() if r.status == TaskStatus.RUNNING],
            _RUNNING_FIELDS)
    return records


def _upsert(db: str, records: list[TaskRecord], fields: list[str]) -> None:
    for start in range(0, len(records), 500):
        rows.upsert(db, records[start:start + 500], fields)


def is_task(message: Message) -> bool:
    payload = message.payload
    return isinstance(payload, dict) and ("task" in payload or "task_result_id" in payload)


def run_task(message: Message) -> None:
    db = vendor.alias()
    with _lock:
        record = _started.pop(message.pk, None)
    batched = record is not None and not connections[db].in_atomic_block
    if record is None:
        record = start(db, [message]).get(message.pk)
    if record is None or record.status in FINISHED_STATUSES:
        return  # not a task, or a repeated delivery of a finished one
    backend = task_backends[record.backend]
    task = load_task(record)
    if record.cancel_requested:
        _finish(db, message, record, batched, TaskStatus.FAILED,
                error=TaskCancelled("Cancelled before it started."))
        task_finished.send(sender=type(backend), task_result=to_task_result(record, task))
        return
    result = to_task_result(record, task)
    task_started.send(sender=type(backend), task_result=result)
    args: list[Any] = list(record.args)
    if task.takes_context:
        args.insert(0, TaskContext(task_result=result))
    timeout = task.timeout if isinstance(task, QueueTask) else None
    try:
        value = normalize_json(call_with_timeout(lambda: task.call(*args, **record.kwargs), timeout))
    except Exception as exc:
        tb = "".join(traceback.format_exception(exc))
        if isinstance(backend, QueueBackend) and backend.should_retry(
                task, len(record.worker_ids), exc):
            record.errors = [*record.errors, error_entry(exc, tb)]
            record.status = TaskStatus.READY
            record.save(using=db, update_fields=["status", "errors"])
            raise RetryTask(f"{record.task_path} failed; retrying") from exc
        _finish(db, message, record, batched, TaskStatus.FAILED, error=exc, tb=tb)
    else:
        _finish(db, message, record, batched, TaskStatus.SUCCESSFUL, value=value)
    task_finished.send(sender=type(backend), task_result=to_task_result(record, task))


def _finish(db: str, message: Message, record: TaskRecord, batched: bool, status: str,
            **outcome: Any) -> None:
    """Record the end of the run: with the worker's next ack when batched, else now."""
    finish(record, status, save=not batched, **outcome)
    if batched:
        with _lock:
            _finished[message.pk] = record


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

