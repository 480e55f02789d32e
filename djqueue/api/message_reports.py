"""Reading what handlers reported: progress while they run, log records afterwards.

Handlers report through ``message.progress()`` or ``djqueue.report_progress()``
(djqueue.storage.handler_reports); their log records are kept by the worker.
Both are kept by message id, so they read the same whether the message is
still pending, finished (in history) or dead-lettered.
"""

from __future__ import annotations

from djqueue.models import Message, MessageLog, MessageProgress
from djqueue.storage import handler_reports


def get_progress(message: Message | int) -> MessageProgress | None:
    """The last progress reported for ``message`` (a Message or its id); None if none was.

    ``fraction`` (0 to 1), ``percent``, ``note``, ``attempt`` (the delivery that
    reported it) and ``updated_at``.
    """
    return handler_reports.progress_of(_message_id(message))


def get_logs(message: Message | int) -> list[MessageLog]:
    """The log records kept from ``message``'s handler runs, oldest first, every attempt's:
    ``attempt``, ``logged_at``, ``level`` (and ``level_name``), ``logger`` and ``text``."""
    return handler_reports.logs_of(_message_id(message))


def _message_id(message: Message | int) -> int:
    if isinstance(message, Message):
        return message.pk
    if isinstance(message, bool) or not isinstance(message, int):
        raise TypeError(f"a Message or a message id is needed, got {type(message).__name__}")
    return message
