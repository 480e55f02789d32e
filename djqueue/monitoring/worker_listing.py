"""The processes registered as serving queues (workers, HTTP API servers holding long
polls, and processes whose ``receive()`` waits), from the rows they keep alive: what
``manage.py djqueue_workers`` prints, as ``celery status`` and ``celery inspect
active`` show Celery's workers.

A process writes its row at its start and at every heartbeat (``HEARTBEAT_INTERVAL``)
on each database whose queues it serves, with how many messages it holds and the ids
of the first few; one silent for ``WORKER_TIMEOUT`` is judged dead by the reaper,
which returns its claims. The rows are read from each database itself, not from a
replica: a heartbeat seconds behind would read as a late worker.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from djqueue.conf import get_settings
from djqueue.models import Worker
from djqueue.storage import host_clock, placement
from djqueue.storage.unreadable_rows import read_rows


def worker_rows() -> list[dict[str, Any]]:
    """One row a process, oldest first: its kind, its queues, threads, the messages it held at its
    freshest heartbeat, that heartbeat's and its start's ages, the databases it is
    registered on, how far its host's clock was from each of their servers' at its latest
    comparison (``clock_offsets``: seconds ahead, None before the first and on SQLite;
    djqueue.storage.host_clock), and whether it is late (silent past WORKER_TIMEOUT). A time a hand edit
    left unreadable gives None for its age and for late
    (djqueue.storage.unreadable_rows)."""
    now, timeout = timezone.now(), get_settings().WORKER_TIMEOUT
    found: dict[str, dict[str, Any]] = {}
    for db in placement.databases():
        for worker in read_rows(Worker.objects.using(db)):
            beat_age = _age(now, worker.heartbeat_at)
            row = found.get(worker.id)
            if row is not None:
                row["databases"].append(db)
                row["clock_offsets"][db] = worker.clock_offset
                if beat_age is None or (row["heartbeat_age"] is not None
                                        and beat_age >= row["heartbeat_age"]):
                    continue  # an older beat than the one already read, or none
            else:
                row = found[worker.id] = {"databases": [db],
                                          "clock_offsets": {db: worker.clock_offset}}
            row.update(id=worker.id, kind=worker.kind, hostname=worker.hostname, pid=worker.pid,
                       queues=list(worker.queues or []), concurrency=worker.concurrency,
                       holding=worker.holding, held_ids=list(worker.held_ids or []),
                       up=_age(now, worker.started_at), heartbeat_age=beat_age,
                       late=None if beat_age is None else beat_age > timeout)
    return sorted(found.values(), key=lambda row: (row["up"] is None, -(row["up"] or 0)))


def _age(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else round((now - then).total_seconds(), 3)


def clock_text(offset: float | None) -> str:
    """An offset as the listing and the dashboard show it: signed ("+" when the host is
    ahead), "(far)" past WARN_PAST (1 s: the log's bound, less the half round trip it
    adds for the read, which the row does not keep), "-" when none was compared
    (SQLite, or not yet)."""
    if offset is None:
        return "-"
    return f"{offset:+.3f} s" + (" (far)" if abs(offset) > host_clock.WARN_PAST else "")
