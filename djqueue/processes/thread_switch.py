"""How long a worker's threads may keep Python's GIL while another waits for it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def switch_interval(seconds: float | None) -> Iterator[None]:
    """``sys.setswitchinterval(seconds)`` for the block (see WORKER_SWITCH_INTERVAL)."""
    if seconds is None:
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
