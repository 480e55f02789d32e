"""Where a draining receiver's last claim of a queue ended, so the next one starts there.

Why: a claim marks its rows claimed and an ack deletes them, and InnoDB only
delete-marks their old entries in the claim index; its purge thread removes
them later. A receiver draining a backlog therefore finds, at the head of the
queue's ready range, the entries of the few thousand messages just taken, and
its ``SELECT ... LIMIT 100 FOR UPDATE SKIP LOCKED`` stepped over all of them
every time, a third of a claim+ack batch's time on MariaDB; starting after the
last row it took (``priority = p AND id > last``) skips that scan (figures on
the docs' performance page).

The shortcut can pass over a message that became ready at an earlier position
meanwhile: released, retried, promoted, redriven, or sent with a higher
priority. So it is bounded. A resume point lives ``CLAIM_RESCAN`` seconds from the
full claim that set it (the next claim after that reads the queue from its
head), a short continued claim falls back to a full one in the same
transaction, and every such change made in this process drops the resume points at
once (``forget``, and ``sent`` for higher-priority sends). A message readied by
another process is therefore claimed at most ``CLAIM_RESCAN`` seconds later
than strict order would have it; nothing is skipped for longer, nothing lost.
Ordered queues and conditional claims never use it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import NamedTuple

from django.db.models import QuerySet

from djqueue.conf import get_settings
from djqueue.models import Message


class ResumePoint(NamedTuple):
    priority: int
    last_id: int
    rescan_at: float


class ResumePoints:
    """The process's resume points, keyed by (database alias, queue id)."""

    def __init__(self) -> None:
        self._points: dict[tuple[str, int], ResumePoint] = {}
        self._lock = threading.Lock()

    def get(self, db: str, queue_id: int) -> ResumePoint | None:
        point = self._points.get((db, queue_id))
        if point is None or time.monotonic() >= point.rescan_at:
            return None
        return point

    def advance(self, db: str, queue_id: int, priority: int, last_id: int,
                since: ResumePoint | None) -> None:
        """After a committed claim that filled its batch: continue after ``last_id``.
        ``since`` is the point the claim started from (None: it read from the head)."""
        rescan = get_settings().CLAIM_RESCAN
        if not rescan:
            return
        rescan_at = since.rescan_at if since is not None else time.monotonic() + rescan
        with self._lock:
            self._points[(db, queue_id)] = ResumePoint(priority, last_id, rescan_at)

    def drop(self, db: str, queue_id: int) -> None:
        with self._lock:
            self._points.pop((db, queue_id), None)

    def forget(self) -> None:
        """Something in this process may have readied a message at an earlier position."""
        if self._points:
            with self._lock:
                self._points.clear()

    def sent(self, messages: Iterable[Message]) -> None:
        """Messages were sent: one with a higher priority than a point's sorts before it."""
        if not self._points:
            return
        highest: dict[int, int] = {}
        for message in messages:
            queue_id, priority = message.queue_id, message.priority
            highest[queue_id] = max(highest.get(queue_id, priority), priority)
        for (db, queue_id), point in list(self._points.items()):
            if highest.get(queue_id, point.priority) > point.priority:
                self.drop(db, queue_id)


resume_points = ResumePoints()


def ready_again(query: QuerySet[Message], **changes: object) -> int:
    """Update the messages of ``query`` with ``changes`` that make them ready (or
    scheduled) again, and drop this process's resume points.

    Every change that puts a message back at a position a claim may already have
    passed goes through here or :func:`row_ready_again`: release, retry, redrive,
    promotion of due messages, retry-now, a visibility change. So no new such
    change can forget the resume points. (Ordered queues never resume a claim, so
    the next message of a group is readied without this.)"""
    count = query.update(**changes)
    if count:
        resume_points.forget()
    return count


def row_ready_again(row: Message, update_fields: list[str]) -> None:
    """:func:`ready_again` for one locked row whose changes are set on it (a retry)."""
    row.save(update_fields=update_fields)
    resume_points.forget()
