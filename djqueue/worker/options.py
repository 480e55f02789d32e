"""What a worker is asked to do: its queues and limits (``djqueue_worker``'s options)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from djqueue import durations
from djqueue.exceptions import ConfigurationError, shown_value


@dataclass
class WorkerOptions:
    queues: list[str]
    concurrency: int = 1
    #: Messages a claim asks for; None: adapted to the backlog and the handlers (see
    #: djqueue.worker.prefetch).
    batch_size: int | None = None
    max_messages: int | None = None
    max_seconds: float | None = None
    burst: bool = False
    visibility_timeout: float | None = None
    shutdown_grace: float | None = None
    #: A condition (expression or Q) limiting which messages are claimed.
    where: Any = None
    #: Seconds a handler may run before its delivery counts as failed (see HandlerThreads).
    time_limit: float | None = None
    #: Abandoned (still running) handler threads past which the worker recycles its
    #: process; default: twice the concurrency, at least 4.
    max_stuck: int | None = None
    #: Resident memory (MB) past which the worker stops claiming, finishes what it
    #: holds and starts its process afresh (Celery's --max-memory-per-child).
    max_rss: int | None = None

    def __post_init__(self) -> None:
        """Refuse options no worker could run with (ConfigurationError), before it starts."""
        for name, high, positive in (
                ("max_seconds", durations.MAX_RETENTION, True),
                ("visibility_timeout", durations.MAX_LEASE, True),
                ("shutdown_grace", durations.MAX_PROCESS_WAIT, False),
                ("time_limit", durations.MAX_PROCESS_WAIT, True)):
            value = getattr(self, name)
            if value is not None:
                try:
                    setattr(self, name, durations.check(value, name, high=high,
                                                        positive=positive))
                except ValueError as exc:
                    raise ConfigurationError(str(exc)) from None
        for name in ("concurrency", "batch_size", "max_messages", "max_stuck", "max_rss"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ConfigurationError(f"{name} must be a whole number of at least 1, "
                                         f"got {shown_value(value)}.")

    def __str__(self) -> str:
        """The options as the worker's first log line gives them, after its queues."""
        threads = self.concurrency
        said = [f"{threads} handler thread{'s' if threads > 1 else ''}",
                f"claims of {self.batch_size}" if self.batch_size
                else "claims sized to the backlog"]
        if self.where is not None:
            said.append(f"only messages where {self.where}")
        if self.visibility_timeout is not None:
            said.append(f"leases of {self.visibility_timeout:g} s")
        if self.time_limit is not None:
            said.append(f"a run limited to {self.time_limit:g} s")
        if self.burst:
            said.append("until its queues are empty")
        if self.max_messages is not None:
            said.append(f"for {self.max_messages} messages at most")
        if self.max_seconds is not None:
            said.append(f"for {self.max_seconds:g} s at most")
        if self.max_rss is not None:
            said.append(f"restarting past {self.max_rss} MB")
        return ", ".join(said)
