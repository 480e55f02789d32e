"""djqueue: a reliable message and task queue in your Django project's own database.

The public API is importable from here; it loads lazily so that ``djqueue`` can
be named in settings before Django is set up.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "send": "djqueue.api.sending", "send_batch": "djqueue.api.sending",
    "asend": "djqueue.api.async_sending", "asend_batch": "djqueue.api.async_sending",
    "apublish": "djqueue.api.async_sending", "apublish_batch": "djqueue.api.async_sending",
    "receive": "djqueue.api.receiving", "consume": "djqueue.api.receiving",
    "areceive": "djqueue.api.async_receiving", "aconsume": "djqueue.api.async_receiving",
    "OwnerSession": "djqueue.api.receiving",
    "ack_many": "djqueue.storage.transitions",
    "redrive": "djqueue.api.queue_operations", "purge": "djqueue.api.queue_operations",
    "peek": "djqueue.api.queue_operations", "get_message": "djqueue.api.queue_operations",
    "delete": "djqueue.api.queue_operations",
    "delete_batch": "djqueue.api.queue_operations", "finished": "djqueue.api.queue_operations",
    "create_queue": "djqueue.api.queues", "get_queue": "djqueue.api.queues",
    "pause": "djqueue.api.queues", "resume": "djqueue.api.queues",
    "set_limits": "djqueue.api.queues", "add_partition": "djqueue.api.queues",
    "remove_partition": "djqueue.api.queues",
    "get_progress": "djqueue.api.message_reports", "get_logs": "djqueue.api.message_reports",
    "report_progress": "djqueue.storage.handler_reports",
    "task_progress": "djqueue.tasks.task_operations",
    "task_logs": "djqueue.tasks.task_operations",
    "wait_for_result": "djqueue.tasks.task_operations",
    "await_for_result": "djqueue.tasks.task_operations",
    "step": "djqueue.tasks.workflow_canvas", "chain": "djqueue.tasks.workflow_canvas",
    "group": "djqueue.tasks.workflow_canvas", "chord": "djqueue.tasks.workflow_canvas",
    "workflow": "djqueue.tasks.workflow_canvas", "batch": "djqueue.tasks.workflows",
    "get_workflow": "djqueue.tasks.workflow_handles",
    "handler": "djqueue.worker.registry",
    "is_stale": "djqueue.storage.ordered_groups", "message_trace": "djqueue.storage.trace",
    "create_topic": "djqueue.api.topics", "subscribe": "djqueue.api.consumer_groups",
    "register_consumer": "djqueue.api.consumer_groups", "unregister_consumer": "djqueue.api.consumer_groups",
    "publish": "djqueue.api.topics", "publish_batch": "djqueue.api.topics",
    "reset_group": "djqueue.api.consumer_groups", "group_lag": "djqueue.api.consumer_groups",
    "group_queues": "djqueue.api.consumer_groups",
    "Message": "djqueue.models", "Queue": "djqueue.models", "State": "djqueue.models",
    "Postpone": "djqueue.exceptions", "RetryAfter": "djqueue.exceptions",
    "BatchFailures": "djqueue.exceptions",
    "drain": "djqueue.worker.inline_drain",
}

if TYPE_CHECKING:  # what type checkers and editors see: the same names, eagerly
    from djqueue.api.async_receiving import aconsume, areceive
    from djqueue.api.async_sending import apublish, apublish_batch, asend, asend_batch
    from djqueue.api.consumer_groups import (
        group_lag,
        group_queues,
        register_consumer,
        reset_group,
        subscribe,
        unregister_consumer,
    )
    from djqueue.api.message_reports import get_logs, get_progress
    from djqueue.api.queue_operations import (
        delete,
        delete_batch,
        finished,
        get_message,
        peek,
        purge,
        redrive,
    )
    from djqueue.api.queues import (
        add_partition,
        create_queue,
        get_queue,
        pause,
        remove_partition,
        resume,
        set_limits,
    )
    from djqueue.api.receiving import OwnerSession, consume, receive
    from djqueue.api.sending import send, send_batch
    from djqueue.api.topics import create_topic, publish, publish_batch
    from djqueue.exceptions import BatchFailures, Postpone, RetryAfter
    from djqueue.models import Message, Queue, State
    from djqueue.storage.handler_reports import report_progress
    from djqueue.storage.ordered_groups import is_stale
    from djqueue.storage.trace import message_trace
    from djqueue.storage.transitions import ack_many
    from djqueue.tasks.task_operations import (
        await_for_result,
        task_logs,
        task_progress,
        wait_for_result,
    )
    from djqueue.tasks.workflow_canvas import chain, chord, group, step, workflow
    from djqueue.tasks.workflow_handles import get_workflow
    from djqueue.tasks.workflows import batch
    from djqueue.worker.inline_drain import drain
    from djqueue.worker.registry import handler

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'djqueue' has no attribute {name!r}") from None
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value
