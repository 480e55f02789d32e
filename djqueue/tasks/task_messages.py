"""A task message as a worker takes it: its shape, and the backend that must serve it.

A message on a task queue is untrusted input like any other: a worker runs it
only if it has a task message's fields, each of its type, and names a djqueue
backend that serves the message's queue. Anything else raises UntrustedTask, so
the message is dead-lettered with that error and nothing it names is looked up.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from djqueue.api.message_checks import holds_json_nul
from djqueue.exceptions import UntrustedTask
from djqueue.models import Message
from djqueue.tasks.backend import QueueBackend
from djqueue.tasks.compat import task_backends

#: A task message's fields and their types (``task_result_id``: older messages).
_FIELDS = {"task": str, "backend": str, "args": list, "kwargs": dict, "run_after": str,
           "result_id": str, "task_result_id": str, "workflow": list}
#: The fields of a task message enqueued with nothing but its arguments.
_COMMON_FIELDS = {"task", "backend", "args", "kwargs"}


def check_shape(message: Message, payload: Any) -> None:
    """Refuse (UntrustedTask) a message whose payload is not a well-formed task message,
    or that holds a NUL character: a payload's text column stores one, a task's record
    (a JSON column, jsonb on PostgreSQL) does not, and the ack that writes the record
    would fail for the whole batch again and again. The backend refuses it at enqueue;
    this is a message sent past it."""
    if holds_json_nul(message.encoded_body):
        raise UntrustedTask(f"Message {message.pk} holds a NUL character (\\x00), which a "
                            "task's record cannot store.")
    if (type(payload) is dict and payload.keys() == _COMMON_FIELDS
            and type(payload["task"]) is str and type(payload["backend"]) is str
            and type(payload["args"]) is list and type(payload["kwargs"]) is dict):
        return  # the common task message, as the backend writes it and JSON reads it back
    if not (isinstance(payload, dict) and ("task" in payload or "task_result_id" in payload)):
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


def serving_backend(message: Message, alias: str) -> type[QueueBackend]:
    """The class of the djqueue backend ``alias`` (the sender of the task signals), which
    must serve the message's queue; else UntrustedTask."""
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
