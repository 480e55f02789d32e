"""Typed access to the ``DJQUEUE`` setting.

Every option has a default here; ``settings.DJQUEUE`` overrides any of them.
The parsed object is cached and rebuilt when tests change the setting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from djqueue import durations
from djqueue.exceptions import ConfigurationError, shown_value

#: A MySQL stream queue's stepped retry schedule, in seconds: the delay before
#: retry n is ``DEFAULT_BACKOFF[n - 1]`` (the last step repeats).
DEFAULT_BACKOFF: tuple[int, ...] = (
    10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
)


@dataclass(frozen=True)
class Settings:
    #: Database alias holding djqueue's tables. Transactional send needs it to be
    #: the alias the application writes to.
    DATABASE: str = "default"
    #: Queues kept on other database aliases than DATABASE: a queue's name, or a pattern
    #: ending in ``*`` (``"reports.*"``), -> a ``DATABASES`` alias, or a list of two or
    #: more (the queue is partitioned over them). See djqueue.storage.placement.
    QUEUE_DATABASES: dict[str, str | list[str]] = field(default_factory=dict)
    #: A read replica of DATABASE (an alias of DATABASES): the dashboard, the metrics and
    #: the export read the home database's rows from it, and show its lag. None: they
    #: read the home database itself.
    READ_DATABASE: str | None = None
    #: Queue name -> dotted path of a handler ``callable(message)``.
    HANDLERS: dict[str, Any] = field(default_factory=dict)
    #: Defaults for queues created without explicit options.
    VISIBILITY_TIMEOUT: float = 30.0
    MAX_ATTEMPTS: int = 16
    BACKOFF: tuple[int, ...] = DEFAULT_BACKOFF
    #: Each backoff step is lengthened by up to this fraction, at random, so that
    #: messages that failed together do not all retry together (Oban's and Celery's
    #: jitter); 0: the exact steps.
    RETRY_JITTER: float = 0.1
    RETENTION: float = 7 * 24 * 3600.0
    #: Create a queue on first ``send`` instead of raising ``QueueNotFound``.
    AUTO_CREATE_QUEUES: bool = False
    #: How long a process trusts its cached copy of a queue's row (seconds).
    QUEUE_CACHE_TTL: float = 1.0
    #: Worker heartbeat period; a worker silent for WORKER_TIMEOUT is dead.
    HEARTBEAT_INTERVAL: float = 2.0
    WORKER_TIMEOUT: float = 10.0
    #: Seconds between a process's comparisons of its host's clock with the database
    #: servers' (djqueue.storage.host_clock); it compares as it starts, or first needs
    #: their time, too.
    CLOCK_CHECK_INTERVAL: float = 600.0
    #: Idle polling backs off from POLL_MIN to POLL_MAX seconds.
    POLL_MIN: float = 0.01
    POLL_MAX: float = 0.5
    #: How often scheduled (delayed) messages are promoted to ready at the latest.
    PROMOTE_INTERVAL: float = 1.0
    #: Seconds a worker waits for in-flight handlers after SIGTERM.
    SHUTDOWN_GRACE: float = 30.0
    #: Address idle workers listen on for wake-ups from senders (see djqueue.api.worker_wakeups);
    #: None turns them off (workers then find new messages by polling alone).
    WAKE_HOST: str | None = "127.0.0.1"
    #: Seconds a sending process trusts its list of workers' wake addresses.
    WAKE_REFRESH: float = 1.0
    REAPER_INTERVAL: float = 1.0
    #: How often the reaper rolls up statistics, samples queue depths and checks alarms.
    STATS_INTERVAL: float = 10.0
    #: Seconds finished django.tasks results, ended workflows and periodic tick rows are kept.
    RESULT_RETENTION: float = 7 * 24 * 3600.0
    #: Seconds a fired alarm's row is kept: as long as the hourly statistics it can be
    #: read against (djqueue.monitoring.rollups.KEEP).
    ALARM_RETENTION: float = 35 * 24 * 3600.0
    #: Rows deleted per statement when pruning history.
    PRUNE_BATCH: int = 5000
    #: The largest message a send accepts, payload and headers as stored (JSON, UTF-8),
    #: unless its queue sets ``max_payload_bytes`` (SQS's limit, 1 MiB).
    MAX_PAYLOAD_BYTES: int = 1024 * 1024
    #: A bearer token the Prometheus metrics view and ``djqueue_metrics`` ask scrapers
    #: for (``Authorization: Bearer <token>``, Prometheus's ``authorization``
    #: setting); None: they answer anyone who can reach them.
    METRICS_TOKEN: str | None = None
    #: PostgreSQL: the reaper vacuums a busy djqueue table once its dead rows reach this
    #: many (djqueue.maintenance.vacuuming); None: never (leave it to autovacuum).
    VACUUM_DEAD_ROWS: int | None = 20_000
    #: The HTTP API (djqueue.http): threads (each with its database connection) its
    #: endpoints run their database work on, per server process.
    HTTP_DATABASE_THREADS: int = 8
    #: The largest request body it reads; a larger one gets 413 before it is read.
    HTTP_MAX_BODY_BYTES: int = 4 * 1024 * 1024
    #: The longest long poll (``wait`` of a receive), seconds (SQS's limit, 20).
    HTTP_MAX_WAIT: float = 20.0
    #: The most messages one send or receive request carries.
    HTTP_MAX_BATCH: int = 100
    #: The most different ``where`` conditions one caller's long polls may wait with at
    #: once, per server process: each condition is a line of its own, claiming on every
    #: wake-up (djqueue.http.long_polls).
    HTTP_MAX_WAIT_CONDITIONS: int = 8
    #: OpenTelemetry spans for sends and handler runs, when an SDK is configured
    #: (djqueue.tracing); False: none, whatever is installed.
    TRACING: bool = True
    #: Log records a handler emits while it runs are kept with its message from this
    #: level up (a name or number; djqueue.worker.handler_logs); None keeps none.
    #: Records must first pass their logger's level (for most loggers, the root's).
    HANDLER_LOG_LEVEL: int | None = logging.INFO
    #: At most this many records a delivery (a last one says how many more were dropped).
    HANDLER_LOG_RECORDS: int = 100
    #: A record longer than this many characters (traceback included) is cut.
    HANDLER_LOG_CHARS: int = 4000
    #: Seconds between two progress writes of one handler run; a report made sooner is
    #: written with the next one, or when the handler returns.
    PROGRESS_INTERVAL: float = 0.2
    #: Periodic django.tasks run by the reaper: name -> {"task", "cron", "args", "kwargs",
    #: "catch_up", "time_zone"}; see djqueue.maintenance.periodic.
    PERIODIC: dict[str, dict] = field(default_factory=dict)
    #: Seconds a receiver draining a backlog on MySQL/MariaDB may continue its claims
    #: after the last message it took instead of reading the queue from its head; a
    #: message readied meanwhile at an earlier position (by another process) waits at
    #: most this long. 0: always from the head. See djqueue.storage.claim_resume.
    CLAIM_RESCAN: float = 0.1
    #: Seconds a thread may hold the GIL while another waits for it, in worker processes
    #: (``sys.setswitchinterval``; Python's default is 0.005); None leaves it alone.
    #: Why shorter: the loop thread returns from each database round trip needing the
    #: GIL while a handler thread computes; with Python's 5 ms it could wait that long.
    WORKER_SWITCH_INTERVAL: float | None = 0.0005
    #: Net allocations between two collections of Python's young generation in worker
    #: processes, which also freeze the objects they hold once started (see
    #: djqueue.processes.garbage_collection); None leaves Python's (2,000) alone.
    WORKER_GC_THRESHOLD: int | None = 20_000

    @classmethod
    def from_django(cls) -> Settings:
        overrides: dict[str, Any] = dict(getattr(django_settings, "DJQUEUE", {}) or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigurationError(f"Unknown DJQUEUE setting(s): {', '.join(unknown)}")
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
        return cls(**overrides)


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


@cache
def get_settings() -> Settings:
    return Settings.from_django()


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in {"DJQUEUE", "DATABASES"}:
        get_settings.cache_clear()
