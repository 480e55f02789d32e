"""What a worker is asked to do: its queues and limits (``djqueue_worker``'s options)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class WorkerOptions:
    queues: list[str]
    concurrency: int = 1
    batch_size: int = 10
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
