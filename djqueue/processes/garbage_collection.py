"""How often Python's cyclic garbage collector runs in a worker process.

A worker allocates many short-lived containers a message (a model instance with
its state, a payload's dict, a task's values), and few of them outlive the
batch. At CPython's default of a young-generation pass every 2,000 net
allocations, and an older pass every tenth of those, a django.tasks worker on
SQLite spent 0.4 s collecting in a 60,000-task drain (7 µs a task, with every
thread stopped meanwhile), and each full pass walked the tens of thousands of
objects Django and the project created at start and never free.

So a worker freezes what exists once it has started (``gc.freeze``: never
scanned again; those objects live as long as the process anyway) and lets more
allocations pass between young-generation collections (``gc.set_threshold``).
Reference counting frees most objects at once either way; the threshold only
bounds how long cyclic garbage may wait, at the cost of at most that many
objects' memory. Both are given back when the worker stops (it may run inside
another process, as the tests do).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collected_less(young_threshold: int | None) -> Iterator[None]:
    """Freeze the objects that exist now and collect the young generation every
    ``young_threshold`` net allocations, for the block; None leaves both alone
    (see WORKER_GC_THRESHOLD)."""
    if young_threshold is None:
        yield
        return
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(young_threshold, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
