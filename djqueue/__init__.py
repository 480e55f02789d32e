"""djqueue: a reliable message and task queue in your Django project's own database.

The public API is importable from here; it loads lazily so that ``djqueue`` can
be named in settings before Django is set up.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "send": "djqueue.api", "send_batch": "djqueue.api", "receive": "djqueue.api",
    "consume": "djqueue.api", "OwnerSession": "djqueue.api",
    "ack_many": "djqueue.lifecycle",
    "redrive": "djqueue.operations", "purge": "djqueue.operations",
    "peek": "djqueue.operations", "get_message": "djqueue.operations",
    "delete": "djqueue.operations", "finished": "djqueue.operations",
    "create_queue": "djqueue.queues", "get_queue": "djqueue.queues",
    "pause": "djqueue.queues", "resume": "djqueue.queues",
    "handler": "djqueue.handlers",
    "is_stale": "djqueue.groups", "message_trace": "djqueue.trace",
    "create_topic": "djqueue.topics", "subscribe": "djqueue.topics",
    "register_consumer": "djqueue.topics", "unregister_consumer": "djqueue.topics",
    "publish": "djqueue.topics", "publish_batch": "djqueue.topics",
    "reset_group": "djqueue.topics", "group_lag": "djqueue.topics",
    "group_queues": "djqueue.topics",
    "Message": "djqueue.models", "Queue": "djqueue.models", "State": "djqueue.models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'djqueue' has no attribute {name!r}") from None
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value
