"""The dashboard's view of partitioned queues: each one as a whole, and each partition.

A partitioned queue's rows live on several databases (djqueue.storage.partitions);
the dashboard shows one database at a time, so this takes the directory rows of
the home database (read already, with its queues) and, for each, reads its
partitions' latest depth samples (the reaper's): one indexed read a partition,
from its read replica where there is one. Without partitioned queues it reads
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import DatabaseError

from djqueue.models import Queue
from djqueue.monitoring import rollups
from djqueue.storage import partitions, placement

COUNTS = ("ready", "scheduled", "in_flight", "waiting", "dead")


@dataclass
class PartitionRow:
    database: str
    draining: bool
    #: None: the database did not answer.
    counts: dict[str, int] | None


@dataclass
class PartitionedQueue:
    name: str
    paused: bool
    partitions: list[PartitionRow] = field(default_factory=list)

    @property
    def totals(self) -> dict[str, int]:
        return {name: sum(p.counts[name] for p in self.partitions if p.counts)
                for name in COUNTS}

    @property
    def unanswered(self) -> list[str]:
        return [p.database for p in self.partitions if p.counts is None]


def load(queues: list[Queue]) -> list[PartitionedQueue]:
    """The partitioned ones of ``queues`` (the home database's rows), each with its
    partitions."""
    found = []
    for directory in queues:
        if directory.partitions is None:
            continue
        summary = PartitionedQueue(directory.name, directory.paused)
        for db in partitions.served(directory):
            summary.partitions.append(PartitionRow(
                db, db not in directory.partitions, _counts(directory.name, db)))
        found.append(summary)
    return found


def _counts(name: str, db: str) -> dict[str, int] | None:
    if partitions.is_down(db):
        return None
    try:
        row = (rollups.with_depths(Queue.objects.using(placement.read_database(db)))
               .filter(name=name).first())
    except DatabaseError as exc:
        if not partitions.unreachable(exc):
            raise
        partitions.mark_down(db, exc)
        return None
    depth = getattr(row, "depth", None) if row is not None else None
    return {name: getattr(depth, name, 0) if depth else 0 for name in COUNTS}
