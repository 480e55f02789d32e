"""The Tasks framework's INFO records of each run, not made in a worker process while
no handler would write them.

Django's own receivers of ``task_started`` and ``task_finished`` log every run's start
and end at INFO on the framework's logger (``django.tasks``; ``django_tasks`` with the
backport). Django's default logging lets INFO through on that logger, so both records
are made in full (a caller lookup, thread and process names, a time) and then
dropped by every handler, when ``DEBUG`` is off: the console handler writes only
under ``DEBUG``, the mail handler only ERROR. That was the largest single share of a
django.tasks worker's CPU (docs/performance.md).

So a worker process (``djqueue_worker``, which calls :func:`follow`) sets that
logger's level to WARNING while no INFO record on it could reach a handler, and
takes the level back off, within a second, once one could (a handler added at run
time, logging configured again). A record reaches no handler when, on the logger's
way up to the root (as far as propagation goes), every handler has a level above
INFO, or a filter that is Django's ``RequireDebugTrue`` with ``DEBUG`` off (or
``RequireDebugFalse`` with it on), or is the worker's capture of handler logs,
which keeps no record of this logger (djqueue.worker.handler_logs). What this
cannot judge counts as reaching, and the level is left alone: any other filter (it
might count what it sees), a filter on a logger, a level the project set on this
logger, or a logger below it.

While no such record is made in a worker process (held back here, or by the
project's own level on the logger), a successful run's two signals are not sent
either where only the framework's receivers would get them (:func:`runs_unheard`).

A failed run is logged at ERROR, which this never holds back. Nothing is changed
outside a worker process, or under a logging configuration that writes the records.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.utils.log import RequireDebugFalse, RequireDebugTrue

from djqueue.storage import fastpath
from djqueue.tasks.compat import run_log_receivers, task_finished, task_run_logger, task_started
from djqueue.worker import handler_logs

#: Seconds between two checks of the logging configuration while following.
RECHECK = 1.0

_lock = threading.Lock()
_following = False
_raised = False  # the level is WARNING because of this module
_checked_at = 0.0
#: By sender: whether a successful run's signals reach only the framework's own
#: receivers (see :func:`runs_unheard`); forgotten at every check.
_unheard: dict[object, bool] = {}


def follow() -> None:
    """Hold back the INFO records of task runs in this process while they reach no
    handler (see the module's docstring); checked again by :func:`recheck`."""
    global _following
    _following = True
    _apply(time.monotonic())


def recheck() -> None:
    """Check the logging configuration again if a second has passed since the last
    check. A run calls this: the cost is one clock read."""
    if _following:
        now = time.monotonic()
        if now - _checked_at >= RECHECK:
            _apply(now)


def runs_unheard(sender: object) -> bool:
    """Whether a successful run's ``task_started`` and ``task_finished`` from ``sender``
    would do nothing: in a worker process, the INFO records are not made (this
    module holds them back, or the project's logging keeps the logger above INFO:
    a level of WARNING, the logger disabled), and only the framework's own
    receivers, which make those records, would get the signals. Then a worker need
    not send them (nor build the finished run's TaskResult).

    Why the project's level counts too: a project that quiets the framework's
    logger, as many do in production, ran its tasks slower than one that left it
    alone (the bench's "logger at WARNING" row, docs/performance.md).

    Like the records' level, this is judged again within a second of a change (a
    receiver connected while the worker runs). A failed run's ``task_finished``
    logs at ERROR and is always sent."""
    if not (_raised or (_following and not task_run_logger.isEnabledFor(logging.INFO))):
        return False
    found = _unheard.get(sender)
    if found is None:
        started, finished = run_log_receivers
        found = _unheard[sender] = (
            started is not None and finished is not None
            and fastpath.receivers_among(task_started, sender, (started,))
            and fastpath.receivers_among(task_finished, sender, (finished,)))
    return found


def stop_following() -> None:
    """Leave the logger as the project configured it: the level back off if this
    module set it and nothing has set another since."""
    global _following, _raised
    with _lock:
        _following = False
        if _raised and task_run_logger.level == logging.WARNING:
            task_run_logger.setLevel(logging.NOTSET)
            _raised = False


def _apply(now: float) -> None:
    global _raised, _checked_at
    with _lock:
        _checked_at = now
        _unheard.clear()
        if not _following:
            return
        if _raised:
            if task_run_logger.level != logging.WARNING:
                _raised = False  # logging configured again: its level stands
            elif not info_reaches_no_handler(task_run_logger):
                task_run_logger.setLevel(logging.NOTSET)
                _raised = False
        elif task_run_logger.level == logging.NOTSET and info_reaches_no_handler(
                task_run_logger):
            task_run_logger.setLevel(logging.WARNING)
            _raised = True


def info_reaches_no_handler(logger: logging.Logger) -> bool:
    """Whether an INFO record on ``logger`` is certain to be written by no handler and
    seen by no filter, by the rule of the module's docstring (the logger's own level
    aside: that is what this module sets)."""
    if logger.disabled or _has_child(logger):
        return False
    current: logging.Logger | None = logger
    found_handler = False
    while current is not None:
        if current.filters:
            return False
        for handler in current.handlers:
            found_handler = True
            if handler.level > logging.INFO or handler_logs.never_keeps(handler, logger.name):
                continue
            if not handler.filters or not all(_drops(f) for f in handler.filters):
                return False
        if not current.propagate:
            break
        current = current.parent
    if found_handler:
        return True
    # With no handler on the way, Python's last resort writes WARNING and above.
    return logging.lastResort is not None and logging.lastResort.level > logging.INFO


def _drops(record_filter: object) -> bool:
    """Whether ``record_filter`` is one of Django's DEBUG filters that drops every
    record as the settings stand."""
    if type(record_filter) is RequireDebugTrue:
        return not settings.DEBUG
    if type(record_filter) is RequireDebugFalse:
        return bool(settings.DEBUG)
    return False


def _has_child(logger: logging.Logger) -> bool:
    prefix = logger.name + "."
    return any(name.startswith(prefix) for name in list(logger.manager.loggerDict))
