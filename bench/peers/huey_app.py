"""Huey's no-op task on SQLite (``SqliteHuey``, the file ``HUEY_DB``), for
``huey_consumer bench.peers.huey_app.huey``. ``HUEY_FSYNC=off`` opens it with
``fsync=False`` (``PRAGMA synchronous = OFF``); otherwise Huey leaves SQLite's own
default (FULL, an fsync a commit).

Huey keeps no times of its own for a task that returns nothing, so the task counts
itself, as the Celery peer's does: the consumer's threads share one count, and the
``HUEY_TARGET``-th run writes the first and last runs' times to ``HUEY_TALLY`` (JSON).
A payload with ``sent`` (the pickup's) appends its wait to ``HUEY_TALLY`` + ``.pickup``.
A lock and two clock readings a task: a few microseconds beside its transaction.
"""

from __future__ import annotations

import json
import os
import threading
import time

from huey import SqliteHuey

huey = SqliteHuey("bench", filename=os.environ.get("HUEY_DB", "huey-bench.db"),
                  fsync=False if os.environ.get("HUEY_FSYNC") == "off" else None)
_counting = threading.Lock()
_ran = {"count": 0, "first": 0.0}
#: Read once: a read a task would be charged to Huey's side of the ratio.
_TARGET = int(os.environ.get("HUEY_TARGET", "0"))


@huey.task()
def noop(payload: dict) -> None:
    """Does nothing but count itself (and note its pickup wait)."""
    now = time.time()
    if "sent" in payload:
        with _counting, open(os.environ["HUEY_TALLY"] + ".pickup", "a") as pickups:
            pickups.write(f"{now - payload['sent']}\n")
        return
    with _counting:
        _ran["count"] += 1
        if _ran["count"] == 1:
            _ran["first"] = now
        if _ran["count"] == _TARGET:
            with open(os.environ["HUEY_TALLY"], "w") as tally:
                json.dump({"count": _ran["count"], "first": _ran["first"],
                           "last": time.time()}, tally)
