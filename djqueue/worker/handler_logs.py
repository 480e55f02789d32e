"""Keeping the log records a handler emits with its message (HANDLER_LOG_LEVEL and up).

One logging handler on the root logger, added when a worker starts: it keeps a
record only while a handler of this process runs in the record's thread (or in
the event loop of an async handler), in that run's DeliveryReport; every
other record passes by at the cost of one context-variable read. Records must
pass their own logger's level first: with Python's default root level of
WARNING, a handler's ``logger.info()`` never reaches any handler, so the worker
says so at start when that hides records the setting asks for.
"""

from __future__ import annotations

import logging

from djqueue.conf import get_settings
from djqueue.storage import handler_reports

logger = logging.getLogger("djqueue.worker")
#: Loggers whose records are not kept: the Tasks framework logs each run's start and end,
#: which the task's record and the message's trace already say.
NOT_KEPT = ("django.tasks", "django_tasks")


class HandlerLogCapture(logging.Handler):
    """Hands each record emitted inside a handler run to that run's report."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    def handle(self, record: logging.LogRecord) -> bool:
        # No lock (logging.Handler.handle takes one): each report is its run's own.
        if record.levelno < self.level or record.name.startswith(NOT_KEPT):
            return False
        report = handler_reports.current()
        if report is None or not self.filter(record):
            return False
        try:
            report.add(record.levelno, record.name, self.format(record), record.created)
        except Exception:
            self.handleError(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:  # handle() does the work
        self.handle(record)


_capture = HandlerLogCapture()


def never_keeps(logging_handler: logging.Handler, logger_name: str) -> bool:
    """Whether ``logging_handler`` is this capture and drops every record of
    ``logger_name`` unseen (by its level and filters too): one of NOT_KEPT."""
    return logging_handler is _capture and logger_name.startswith(NOT_KEPT)


def install() -> None:
    """Start keeping records at the configured level (once a process; None: stop)."""
    level = get_settings().HANDLER_LOG_LEVEL
    root = logging.getLogger()
    if level is None:
        root.removeHandler(_capture)
        return
    _capture.setLevel(level)
    if _capture not in root.handlers:
        root.addHandler(_capture)
    if root.getEffectiveLevel() > level:
        logger.warning(
            "DJQUEUE['HANDLER_LOG_LEVEL'] is %s but the root logger lets only %s and up "
            "through: a handler's %s records are kept only if its logger sets a level of its "
            "own (or set the root level in LOGGING)", logging.getLevelName(level),
            logging.getLevelName(root.getEffectiveLevel()), logging.getLevelName(level))
