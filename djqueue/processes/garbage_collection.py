"""How often Python's cyclic garbage collector runs in a worker process.

A worker allocates many short-lived containers a message (a model instance with
its state, a payload's dict, a task's values), and few of them outlive the
batch. At CPython's default of a young-generation pass every 2,000 net
allocations the collector stops every thread many times a second in a drain,
and each older pass walks the tens of thousands of objects Django and the
project created at start and never free (docs/performance.md has the figures).

So a worker freezes what exists once it has started (``gc.freeze``: never
scanned again; those objects live as long as the process anyway) and sets how
many net allocations pass between young-generation collections
(``gc.set_threshold``), as WORKER_GC_THRESHOLD says: more than Python's by
default, fewer if a user asks for fewer. Reference counting frees most objects
at once either way; the threshold only bounds how long cyclic garbage may wait,
at the cost of at most that many objects' memory.

Both are given back when the worker stops, since it may run inside another
process (the tests run workers in threads). When several workers share one
process, the first to start freezes, each sets the threshold it was given, and
only the last to stop gives both back, so one worker's stop never undoes what a
still-running one relies on.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_holders = 0
#: Python's thresholds, read by the first holder and given back by the last.
_python_threshold: tuple[int, int, int] | None = None


@contextlib.contextmanager
def collected_less(young_threshold: int | None) -> Iterator[None]:
    """Freeze the objects that exist now and collect the young generation every
    ``young_threshold`` net allocations, for the block; None leaves both alone
    (see WORKER_GC_THRESHOLD)."""
    if young_threshold is None:
        yield
        return
    global _holders, _python_threshold
    with _lock:
        if _holders == 0:
            _python_threshold = gc.get_threshold()
            gc.freeze()
        _holders += 1
        gc.set_threshold(young_threshold, *gc.get_threshold()[1:])
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _python_threshold is not None:
                gc.set_threshold(*_python_threshold)
                gc.unfreeze()
