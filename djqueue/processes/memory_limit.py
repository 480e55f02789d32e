"""Process limits a worker can set on itself."""

from __future__ import annotations

import resource


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
