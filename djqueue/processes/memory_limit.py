"""Process limits a worker can set on itself, and the resident memory it watches."""

from __future__ import annotations

import logging
import os
import resource
import sys
import time

logger = logging.getLogger("djqueue.worker")


def limit_memory(megabytes: int) -> None:
    """Cap the process's address space, so a handler that allocates past it gets a
    MemoryError (and its delivery fails) instead of the kernel's OOM killer ending
    the whole worker. Counts virtual memory: leave room for thread stacks and
    malloc arenas (a few hundred MB for a worker with a handful of threads)."""
    limit = megabytes * 1024 * 1024
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY and limit > hard:
        raise ValueError(f"--max-memory {megabytes} is above the hard limit of "
                         f"{hard // (1024 * 1024)} MB.")
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def resident_megabytes() -> float:
    """This process's resident memory now, in MB (of 1,048,576 bytes): what the kernel
    has in RAM for it, as ``ps`` and the OOM killer count it. Read from
    ``/proc/self/statm`` (a few microseconds); where there is none, the peak resident
    memory so far, which never falls (as Celery's ``--max-memory-per-child`` reads it)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1048576
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1048576 if sys.platform == "darwin" else peak / 1024  # bytes, or KB


class ResidentMemoryWatch:
    """A worker's ``--max-rss``: whether the process's resident memory has passed
    ``limit`` MB, read at most every ``interval`` seconds (a read costs some 10 µs, so
    a claim round pays for it at most 20 times a second). A handler or a library that
    keeps what it allocates is then rid of it by a fresh process, after the messages in
    hand are finished (the shutdown's grace), not by the OOM killer in their middle."""

    def __init__(self, limit: int | None, worker_id: str, interval: float = 0.05) -> None:
        self.limit, self.worker_id, self.interval = limit, worker_id, interval
        self._checked = 0.0

    def outgrown(self) -> bool:
        if self.limit is None:  # the worker's loop asks on every round
            return False
        now = time.monotonic()
        if now < self._checked + self.interval:
            return False
        self._checked = now
        resident = resident_megabytes()
        if resident < self.limit:
            return False
        logger.warning("Resident memory %.0f MB is past --max-rss %d MB: finishing the "
                       "messages in hand, then starting the process afresh", resident,
                       self.limit, extra={"worker": self.worker_id})
        return True
