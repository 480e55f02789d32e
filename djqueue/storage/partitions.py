"""Partitioned queues: one queue spread over several databases (EMQ's partitions).

A partitioned queue has a directory row on the home database whose
``partitions`` lists the databases that take its new messages, and a row of the
same name on each of them, where its messages live. Each partition is an
ordinary queue on its own server: claims, acks, retries, dead letters, ordered
groups and limits work there as anywhere, in one short transaction.

Sending: a message with a group key goes to the partition its key hashes to
(CRC-32 of the key, over the active partitions in order), so a key's messages
keep their order and their per-key limits; one with only a dedup key goes where
that key hashes to, so its duplicates meet it there; any other message goes to
the next partition in turn. A partition that does not answer is marked down for
a moment: keyless messages go to the others meanwhile, and a keyed message for
it raises PartitionUnavailable (or waits for it, with ``block``), never landing
on another partition.

A keyless message whose statement was sent before the connection broke may or
may not be stored: it raises PartitionUnavailable too, rather than be sent
again elsewhere and perhaps twice. Send it again with the same dedup key: it
goes to the same partition, and is stored once.

Receiving: a worker or receiver serving the queue claims from every partition,
starting from another one every ROTATE_EVERY seconds (each process from its own);
one that fails is left alone for a while and the others keep flowing. Why not a
new partition each claim: a worker's claim also acks its last batch, in one
transaction on one database; staying on a partition for a moment keeps the two
together (a new start every claim made each claim two transactions).

The layout changes at run time (djqueue.storage.partition_layout) and every process
sees it within QUEUE_CACHE_TTL. A new partition takes new
messages at once. A removed one takes none and is served until empty; then the
reaper takes it off the list.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from djqueue.durations import validate_delay
from djqueue.exceptions import ConfigurationError, PartitionUnavailable, QueueNotFound
from djqueue.models import Queue
from djqueue.storage.queue_lookup import get_queue_on

logger = logging.getLogger("djqueue")
T = TypeVar("T")
#: Seconds a partition that failed is passed over by this process's sends and receives.
DOWN_FOR = 2.0
#: Seconds a receiver starts its claims from the same partition.
ROTATE_EVERY = 0.1

_down: dict[str, float] = {}
_turn = itertools.count()
_lock = threading.Lock()


def is_partitioned(queue: Queue) -> bool:
    return queue.partitions is not None


def active_partitions(queue: Queue) -> list[str]:
    """The databases a partitioned queue's new messages go to, in order."""
    if queue.partitions is None:
        raise ConfigurationError(f"Queue {queue.name!r} is not partitioned.")
    return list(queue.partitions)


def served(queue: Queue) -> list[str]:
    """The partitions claims serve: the active ones, then those draining."""
    active = active_partitions(queue)
    return [*active, *(d for d in queue.draining_partitions or () if d not in active)]


# Which partitions answer

def is_down(db: str) -> bool:
    until = _down.get(db)
    return until is not None and until > time.monotonic()


def mark_down(db: str, exc: BaseException | None = None) -> None:
    if not is_down(db):
        logger.warning("Partition database %s does not answer; passing it over for %g s",
                       db, DOWN_FOR, exc_info=exc, extra={"database": db})
    _down[db] = time.monotonic() + DOWN_FOR
    conn = connections[db]
    if not conn.in_atomic_block:  # the next use connects afresh
        with contextlib.suppress(DatabaseError):
            conn.close()


def unreachable(exc: BaseException) -> bool:
    """Whether a database error says the server is gone (not that a statement failed)."""
    return isinstance(exc, OperationalError | InterfaceError)


# Sending

def partition_for(queue: Queue, group_key: str | None) -> str:
    """The partition a message goes to: its key's (a group key, else a dedup key), else
    the next that answers."""
    active = active_partitions(queue)
    if group_key is not None:
        return active[zlib.crc32(group_key.encode()) % len(active)]
    start = next(_turn)
    for offset in range(len(active)):
        db = active[(start + offset) % len(active)]
        if not is_down(db):
            return db
    raise PartitionUnavailable(f"No partition of queue {queue.name!r} answers "
                               f"({', '.join(active)}).")


def send_to_partition(queue: Queue, group_key: str | None, send: Callable[[Queue], T], *,
                      block: bool = False, timeout: float | None = None) -> T:
    """``send(partition row)`` on the partition the message belongs to, passing over those
    that do not answer; see the module's docstring."""
    timeout = validate_delay(timeout, "timeout")  # as a send to any queue checks it
    deadline = None if timeout is None else time.monotonic() + timeout
    tried: set[str] = set()
    while True:
        db = partition_for(queue, group_key)
        if group_key is not None and is_down(db) and not block:
            raise PartitionUnavailable(
                f"Partition {db!r} of queue {queue.name!r}, where key {group_key!r} goes, "
                "does not answer.")
        if not is_down(db) or group_key is None:
            conn = connections[db]
            connected = False
            try:
                if not conn.in_atomic_block:
                    conn.ensure_connection()
                connected = True
                return send(get_queue_on(queue.name, db))
            except DatabaseError as exc:
                if not unreachable(exc) or conn.in_atomic_block:
                    raise
                mark_down(db, exc)
                tried.add(db)
                if not connected and group_key is None and len(tried) < len(active_partitions(queue)):
                    continue  # nothing was sent: another partition takes it
                if not block or connected:
                    raise PartitionUnavailable(
                        f"Partition {db!r} of queue {queue.name!r} does not answer" + (
                            "; the message may have been stored there: send it again with "
                            "the same dedup key" if connected else ".")) from exc
        if deadline is not None and time.monotonic() >= deadline:
            raise PartitionUnavailable(
                f"Partition {db!r} of queue {queue.name!r} did not answer within "
                f"{timeout:g} s.")
        time.sleep(0.1)
        tried.clear()


# Receiving

def expand(queues: Sequence[Queue]) -> list[Queue]:
    """``queues`` with each partitioned one replaced by its partitions' rows (those that
    answer), starting from a different partition each call."""
    if not any(q.partitions is not None for q in queues):
        return list(queues)
    found: list[Queue] = []
    turn = int(time.monotonic() / ROTATE_EVERY) + os.getpid()
    for queue in queues:
        if queue.partitions is None:
            found.append(queue)
            continue
        names = served(queue)
        for offset in range(len(names)):
            db = names[(turn + offset) % len(names)]
            if is_down(db):
                continue
            try:
                found.append(get_queue_on(queue.name, db))
            except QueueNotFound:
                logger.error("Queue %s has no row on its partition %s", queue.name, db)
            except DatabaseError as exc:
                if not unreachable(exc):
                    raise
                mark_down(db, exc)
    return found
