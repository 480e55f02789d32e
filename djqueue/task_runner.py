"""The handler of task queues: runs one django.tasks task and records its outcome."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

from django.db import connections
from django.utils import timezone

from djqueue import vendor
from djqueue.backend import QueueBackend, QueueTask, error_entry, finish, load_task, to_task_result
from djqueue.exceptions import TaskCancelled, TaskTimeout
from djqueue.models import FINISHED_STATUSES, Message, TaskRecord, TaskStatus
from djqueue.tasks_compat import TaskContext, normalize_json, task_backends, task_finished, task_started


class RetryTask(Exception):
    """Raised to djqueue so that the message is retried with the queue's backoff."""


def run_task(message: Message) -> None:
    db = vendor.alias()
    record = TaskRecord.objects.using(db).filter(pk=message.payload["task_result_id"]).first()
    if record is None or record.status in FINISHED_STATUSES:
        return  # nothing to run, or a repeated delivery of a finished task
    backend = task_backends[record.backend]
    task = load_task(record)
    if record.cancel_requested:
        finish(record, TaskStatus.FAILED, error=TaskCancelled("Cancelled before it started."))
        task_finished.send(sender=type(backend), task_result=to_task_result(record, task))
        return
    now = timezone.now()
    record.status = TaskStatus.RUNNING
    record.started_at = record.started_at or now
    record.last_attempted_at = now
    record.worker_ids = [*record.worker_ids, message.owner]
    record.save(using=db, update_fields=["status", "started_at", "last_attempted_at", "worker_ids"])
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
        finish(record, TaskStatus.FAILED, error=exc, tb=tb)
    else:
        finish(record, TaskStatus.SUCCESSFUL, value=value)
    task_finished.send(sender=type(backend), task_result=to_task_result(record, task))


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
