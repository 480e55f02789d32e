"""Every queue with its depth as the reaper last sampled it: the rows that ``manage.py
djqueue_queues`` prints and the HTTP API's ``GET queues`` answers (SQS's ListQueues
with its queues' approximate counts; RabbitMQ's queue listing).

The depths are the reaper's samples (one ``QueueDepth`` row a queue, every
``STATS_INTERVAL``), so a listing reads one small row a queue and never counts the
message table; :func:`sample_now` takes a sample first, with the reaper's own grouped
pass over the claim index. A queue lives on one database, or on several when it is
partitioned: it has a row for each.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.utils import timezone

from djqueue.models import Queue
from djqueue.monitoring import rollups
from djqueue.storage import dialects, placement

#: A row's counts, by the state of the messages counted.
COLUMNS = ("ready", "scheduled", "in_flight", "waiting", "dead")


def sample_now() -> None:
    """Sample every queue's depth now, on every database, as the reaper does."""
    for db in placement.databases():
        with dialects.using(db):
            rollups.sample_depth()


def queue_rows(*, prefix: str = "", after: str = "", limit: int | None = None,
               visible: Callable[[str], bool] | None = None,
               fresh: bool = False) -> tuple[list[dict[str, Any]], bool]:
    """The rows of the queues whose names start with ``prefix`` and come after
    ``after``, that ``visible`` admits (all without it): a row for each database a
    queue is on, by name. At most ``limit`` queues; the flag says whether more follow.

    Names are ordered by Python (by code point), not by the databases' collations,
    which differ between servers and would break the ``after`` cursor across them;
    so each database's names (not their rows) for the prefix are read, then the
    rows of the page's queues alone. ``fresh`` reads where the samples are written
    rather than from a replica (after :func:`sample_now`)."""
    sources = {db: db if fresh else placement.read_database(db) for db in placement.databases()}
    names: set[str] = set()
    for source in sources.values():
        found = Queue.objects.using(source).order_by()
        if prefix:
            found = found.filter(name__startswith=prefix)
        names.update(found.values_list("name", flat=True))
    # startswith again: MariaDB's and MySQL's default collations match LIKE without case.
    ordered = sorted(n for n in names if n.startswith(prefix) and n > after
                     and (visible is None or visible(n)))
    page = ordered if limit is None else ordered[:limit]
    rows: list[dict[str, Any]] = []
    at = timezone.now()
    for db, source in sources.items():
        for start in range(0, len(page), 500):  # bounded IN lists
            rows.extend(_row(queue, db, at) for queue in rollups.with_depths(
                Queue.objects.using(source)).filter(name__in=page[start:start + 500]))
    order = {db: i for i, db in enumerate(sources)}
    rows.sort(key=lambda row: (row["name"], order[row["database"]]))
    return rows, len(page) < len(ordered)


def _row(queue: Queue, db: str, at: datetime) -> dict[str, Any]:
    """A queue row's line: its depth sample (None where the reaper has taken none)."""
    depth = getattr(queue, "depth", None)
    return {"name": queue.name, "database": db, "paused": queue.paused,
            **{c: getattr(depth, c) if depth else None for c in COLUMNS},
            "oldest_ready_age": _age(at, depth.oldest_ready_at if depth else None),
            "sample_age": _age(at, depth.sampled_at if depth else None)}


def _age(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else round((now - then).total_seconds(), 3)


def by_queue(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row a queue from :func:`queue_rows`' rows (a partitioned queue has one a
    database): its counts summed, its oldest ready message's and its oldest sample's
    ages; None where no database has a sample. Paused if any of its rows is."""
    combined: dict[str, dict[str, Any]] = {}
    for row in rows:
        into = combined.get(row["name"])
        if into is None:
            combined[row["name"]] = {k: v for k, v in row.items() if k != "database"}
            continue
        into["paused"] = into["paused"] or row["paused"]
        for column in COLUMNS:
            if row[column] is not None:
                into[column] = (into[column] or 0) + row[column]
        for age in ("oldest_ready_age", "sample_age"):
            if row[age] is not None:
                into[age] = max(into[age] or 0.0, row[age])
    return list(combined.values())
