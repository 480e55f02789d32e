"""Typed access to the ``DJQUEUE`` setting.

Every option has a default here; ``settings.DJQUEUE`` overrides any of them.
The parsed object is cached and rebuilt when tests change the setting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from djqueue.exceptions import ConfigurationError
from djqueue.setting_checks import checked_overrides

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
        return cls(**checked_overrides(overrides))


@cache
def get_settings() -> Settings:
    return Settings.from_django()


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in {"DJQUEUE", "DATABASES"}:
        get_settings.cache_clear()
