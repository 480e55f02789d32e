"""What a run calls: which receivers a signal would reach, and a task's function
called without django.tasks' per-call inspection."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from django.dispatch import Signal

from djqueue.storage.fastpath import verified


def receivers_among(signal: Signal, sender: object, known: tuple[Callable, ...]) -> bool:
    """Whether every receiver ``signal`` would call for ``sender`` is one of ``known``.

    Why: Django's public API tells only whether a signal has receivers at all. A
    django.tasks worker sends ``task_started`` and ``task_finished`` for every run,
    and where only the framework's own logging receivers would get them and their
    records are held back (djqueue.tasks.task_run_logs), the sends do nothing but
    cost a tenth of a task's time. ``Signal._live_receivers`` (Django 5.0 and later)
    gives the receivers as ``send`` would find them. Plain path: False (the caller
    sends)."""
    if not verified.enabled:
        return False
    synchronous, asynchronous = signal._live_receivers(sender)
    return not asynchronous and all(
        any(receiver is mine for mine in known) for receiver in synchronous)


def sync_function(func: Callable[..., Any]) -> Callable[..., Any] | None:
    """``func`` itself when a django.tasks Task of it may be run by calling it, as
    ``Task.call`` does for a function that is not a coroutine function; else None.

    Why: ``Task.call`` asks ``inspect.iscoroutinefunction`` on every run, which is
    the same answer for a task's function each time. Plain path (None, also on
    an unverified Django): ``task.call``."""
    return _sync_function(func) if verified.enabled else None


@functools.lru_cache(maxsize=4096)
def _sync_function(func: Callable[..., Any]) -> Callable[..., Any] | None:
    return None if inspect.iscoroutinefunction(func) else func
