"""Calling a task's function in a worker: its context, its time limit, its value as JSON."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from djqueue.api.message_checks import json_unstorable
from djqueue.exceptions import TaskTimeout
from djqueue.storage import fastpath, payloads
from djqueue.storage.payloads import unstorable
from djqueue.tasks.backend import QueueTask
from djqueue.tasks.compat import Task, TaskContext, TaskResult, normalize_json

#: Types whose values normalize_json returns unchanged.
_JSON_SCALARS = frozenset({type(None), str, int, float, bool})


def call(task: Task, args: list[Any], kwargs: dict[str, Any], result: TaskResult | None) -> Any:
    """Run ``task`` (with its context first if it takes one, within its QueueTask
    timeout); its return value as JSON keeps it. ``result``: the run's TaskResult,
    which may be None only for a task that takes no context."""
    if task.takes_context:
        if result is None:
            raise TypeError(f"{task.module_path} takes a context: its run needs its result.")
        args.insert(0, TaskContext(task_result=result))
    timeout = task.timeout if isinstance(task, QueueTask) else None
    func = fastpath.sync_function(task.func)
    if func is None:  # Task.call: a coroutine function's runs with async_to_sync
        fastpath.keep_event_loop()
        func = task.call
    value = call_with_timeout(lambda: func(*args, **kwargs), timeout)
    if type(value) is str:
        why = unstorable(value)
    elif type(value) in _JSON_SCALARS:  # normalize_json returns these as they are
        return value
    else:
        value = normalize_json(value)
        why = json_unstorable(payloads.encode(value))
    if why is not None:  # the run fails, and says why, rather than its record's write
        raise ValueError(f"The task's return value {why}.")
    return value


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
