"""What each ``DJQUEUE`` setting may be, checked as djqueue.conf reads the settings: a
bad value is a ConfigurationError naming the setting and what it takes (the system
check djqueue.E001), never a Python error from deep inside a worker, the reaper or a
check that later uses it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings as django_settings

from djqueue import durations
from djqueue.exceptions import ConfigurationError, shown_value


def checked_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` (the keys Settings has) checked, with the values Settings keeps
    in their own form (a log level as its number, the backoff as a tuple)."""
    _check_kinds(overrides)
    for name, (high, positive) in _DURATIONS.items():
        if name in overrides:
            _check_duration(overrides[name], f"DJQUEUE[{name!r}]", high, positive)
    for name, (low, high) in _COUNTS.items():
        value = overrides.get(name, low)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigurationError(
                f"DJQUEUE[{name!r}] must be a whole number from {low} to {high}, "
                f"got {shown_value(value)}")
    if "BACKOFF" in overrides and (not isinstance(overrides["BACKOFF"], list | tuple)
                                   or not overrides["BACKOFF"]):
        raise ConfigurationError("DJQUEUE['BACKOFF'] must be a non-empty list of seconds, "
                                 f"got {shown_value(overrides['BACKOFF'])}")
    for step in overrides.get("BACKOFF", ()):
        _check_duration(step, "A DJQUEUE['BACKOFF'] step", durations.MAX_DELAY, False)
    _check_seconds(overrides, "WORKER_SWITCH_INTERVAL", "None or a number of seconds in "
                   "(0, 1]", lambda v: v is None or 0 < v <= 1)
    threshold = overrides.get("WORKER_GC_THRESHOLD")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(
            threshold, int) or not 100 <= threshold <= 10**7):
        raise ConfigurationError("DJQUEUE['WORKER_GC_THRESHOLD'] must be None or a whole "
                                 f"number from 100 to 10,000,000, got {shown_value(threshold)}")
    _check_seconds(overrides, "RETRY_JITTER", "a fraction from 0 to 1",
                   lambda v: v is not None and 0 <= v <= 1)
    _check_seconds(overrides, "CLAIM_RESCAN", "a number of seconds in [0, 60]",
                   lambda v: v is not None and 0 <= v <= 60)
    token = overrides.get("METRICS_TOKEN")
    if token is not None and (not isinstance(token, str) or len(token) < 16):
        raise ConfigurationError("DJQUEUE['METRICS_TOKEN'] must be None or a string of at "
                                 "least 16 characters")
    dead_rows = overrides.get("VACUUM_DEAD_ROWS", 1)
    if dead_rows is not None and (isinstance(dead_rows, bool) or not isinstance(
            dead_rows, int) or not 1 <= dead_rows <= 10**10):
        raise ConfigurationError("DJQUEUE['VACUUM_DEAD_ROWS'] must be None or a whole "
                                 f"number from 1 to 10,000,000,000, got {shown_value(dead_rows)}")
    _check_databases(overrides)
    if "HANDLER_LOG_LEVEL" in overrides:
        overrides["HANDLER_LOG_LEVEL"] = _log_level(overrides["HANDLER_LOG_LEVEL"])
    if "BACKOFF" in overrides:
        overrides["BACKOFF"] = tuple(overrides["BACKOFF"])
    return overrides


#: Settings checked for their kind: what the setting is, and the test of a value.
_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "DATABASE": ("an alias of DATABASES", lambda v: isinstance(v, str) and v != ""),
    "WAKE_HOST": ("None or an address to listen on for wake-ups",
                  lambda v: v is None or (isinstance(v, str) and v != "")),
    # A string "False" would be true: only a bool is taken.
    "AUTO_CREATE_QUEUES": ("True or False", lambda v: isinstance(v, bool)),
    "TRACING": ("True or False", lambda v: isinstance(v, bool)),
    "HANDLERS": ("a dict: queue name -> handler", lambda v: isinstance(v, dict)),
    "PERIODIC": ("a dict: entry name -> its task and schedule", lambda v: isinstance(v, dict)),
}


def _check_kinds(overrides: dict[str, Any]) -> None:
    for name, (wanted, allowed) in _KINDS.items():
        if name in overrides and not allowed(overrides[name]):
            raise ConfigurationError(f"DJQUEUE[{name!r}] must be {wanted}, got "
                                     f"{shown_value(overrides[name])}")


#: Duration settings: (upper bound in seconds, whether 0 is refused).
_DURATIONS = {
    "VISIBILITY_TIMEOUT": (durations.MAX_LEASE, True),
    "RETENTION": (durations.MAX_RETENTION, True),
    "RESULT_RETENTION": (durations.MAX_RETENTION, True),
    "ALARM_RETENTION": (durations.MAX_RETENTION, True),
    "QUEUE_CACHE_TTL": (durations.HOUR, False),
    "HEARTBEAT_INTERVAL": (durations.HOUR, True),
    "WORKER_TIMEOUT": (durations.DAY, True),
    "CLOCK_CHECK_INTERVAL": (durations.DAY, True),
    "POLL_MIN": (durations.HOUR, True),
    "POLL_MAX": (durations.HOUR, True),
    "PROMOTE_INTERVAL": (durations.HOUR, True),
    "SHUTDOWN_GRACE": (durations.MAX_PROCESS_WAIT, False),
    "WAKE_REFRESH": (durations.HOUR, True),
    "REAPER_INTERVAL": (durations.HOUR, True),
    "STATS_INTERVAL": (durations.DAY, True),
    "PROGRESS_INTERVAL": (durations.HOUR, False),
    "HTTP_MAX_WAIT": (durations.HOUR, False),
}
#: Whole-number settings: (lowest, highest).
_COUNTS = {
    "MAX_ATTEMPTS": (1, 1000),
    # Its ids go to one statement: PostgreSQL's protocol carries at most 65,535
    # parameters a statement, and server-side binding sends each id as one.
    "PRUNE_BATCH": (1, 50_000),
    "MAX_PAYLOAD_BYTES": (1, 64 * 1024 * 1024),
    "HANDLER_LOG_RECORDS": (1, 10_000),
    "HANDLER_LOG_CHARS": (100, 1024 * 1024),
    "HTTP_DATABASE_THREADS": (1, 256),
    "HTTP_MAX_BODY_BYTES": (1024, 256 * 1024 * 1024),
    "HTTP_MAX_BATCH": (1, 10_000),
    "HTTP_MAX_WAIT_CONDITIONS": (1, 10_000),
}


def _check_duration(value: object, name: str, high: float, positive: bool) -> None:
    try:
        durations.check(value, name, high=high, positive=positive)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


def _check_seconds(overrides: dict[str, Any], name: str, wanted: str,
                   allowed: Callable[[float | None], bool]) -> None:
    """Raise ConfigurationError unless ``overrides[name]`` (when given) is a number (or
    None) that ``allowed`` accepts."""
    if name not in overrides:
        return
    value = overrides[name]
    number = value is None or (isinstance(value, int | float) and not isinstance(value, bool))
    if not (number and allowed(value)):
        raise ConfigurationError(f"DJQUEUE[{name!r}] must be {wanted}, got {shown_value(value)}")


def _check_databases(overrides: dict[str, Any]) -> None:
    """Every QUEUE_DATABASES alias must be in Django's DATABASES (DATABASE is checked by
    the system check djqueue.E002)."""
    known = set(getattr(django_settings, "DATABASES", {}) or {})
    replica = overrides.get("READ_DATABASE")
    if replica is not None and (not isinstance(replica, str) or replica not in known):
        raise ConfigurationError(f"DJQUEUE['READ_DATABASE'] must be None or an alias of "
                                 f"DATABASES ({', '.join(sorted(known))}), got {shown_value(replica)}")
    rules = overrides.get("QUEUE_DATABASES", {})
    if not isinstance(rules, dict):
        raise ConfigurationError("DJQUEUE['QUEUE_DATABASES'] must be a dict: queue name or "
                                 f"pattern -> database alias, got {shown_value(rules)}")
    for pattern, alias in rules.items():
        if not isinstance(pattern, str) or not pattern or "*" in pattern.rstrip("*") or (
                pattern.endswith("**")):
            raise ConfigurationError(
                f"DJQUEUE['QUEUE_DATABASES']: {pattern!r} is not a queue name or a pattern "
                f"ending in one '*'")
        aliases = list(alias) if isinstance(alias, list | tuple) else [alias]
        if isinstance(alias, list | tuple) and (len(aliases) < 2 or len(set(aliases)) != len(
                aliases)):
            raise ConfigurationError(
                f"DJQUEUE['QUEUE_DATABASES'][{pattern!r}]: a partitioned queue's list names "
                f"two or more different aliases, got {shown_value(alias)}")
        for one in aliases:
            if not isinstance(one, str) or one not in known:
                raise ConfigurationError(
                    f"DJQUEUE['QUEUE_DATABASES'][{pattern!r}] must name an alias of DATABASES "
                    f"({', '.join(sorted(known))}) or a list of them, got {shown_value(alias)}")


def _log_level(value: object) -> int | None:
    """A logging level as its number (None stays None: no capture)."""
    if value is None:
        return None
    if isinstance(value, str) and isinstance(logging.getLevelName(value.upper()), int):
        return logging.getLevelName(value.upper())
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 100:
        return value
    raise ConfigurationError("DJQUEUE['HANDLER_LOG_LEVEL'] must be None, a logging level name "
                             f"(such as 'INFO') or a number from 0 to 100, got {shown_value(value)}")
