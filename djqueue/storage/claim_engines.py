"""How a database takes rows that other processes may want: one engine per family.

MariaDB/MySQL and PostgreSQL lock rows, and skip the rows others hold::

    SELECT ... FROM djqueue_message
     WHERE queue_id = %s AND state = 1          -- READY
     ORDER BY priority DESC, id LIMIT %s
       FOR UPDATE SKIP LOCKED;                   -- index djqueue_msg_claim
    UPDATE djqueue_message SET state = 3, owner = %s, lease_token = %s,
           visible_at = %s, claimed_at = %s, attempts = attempts + 1
     WHERE id IN (...);

SQLite has no row locks; its writers are serialised, so one stamped statement
claims, and returns the claimed rows (before SQLite 3.35, the lease token reads
them back)::

    UPDATE djqueue_message SET ... WHERE id IN (SELECT id ... LIMIT %s) RETURNING ...;

Callers ask :func:`engine_for` and never test the database themselves (Oban's
one engine per database, behind one interface).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple, Protocol, TypeVar

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Q, QuerySet

from djqueue.models import Message, Queue, State
from djqueue.storage import dialects
from djqueue.storage.statements.claim_statements import (
    lock_ready,
    stamp_claimed,
    stamp_first_ready,
)

T = TypeVar("T", bound=QuerySet)


class Stamp(NamedTuple):
    """What a claim writes on each row: owner, lease token, lease end, claim time."""

    owner: str
    token: str
    lease_end: datetime
    now: datetime


class ClaimEngine(Protocol):
    #: Whether a claim may continue after the last row of this process's previous one
    #: (see djqueue.storage.claim_resume); only where rows are locked and skipped.
    resumes_claims: bool

    def claim(self, db: str, queue: Queue, want: int, stamp: Stamp,
              where: Q | None) -> list[Message]:
        """Claim up to ``want`` ready messages of ``queue``, in claim order."""
        ...

    def candidates(self, db: str, queue: Queue, want: int, where: Q | None) -> list[Message]:
        """The next ``want`` ready messages of ``queue``, in claim order, held for this
        transaction (locked where rows lock) so that the caller may stamp any of them."""
        ...

    def stamp(self, db: str, rows: list[Message], stamp: Stamp) -> None:
        """Stamp ``rows`` (from :meth:`candidates`) claimed, in the database and on the
        instances."""
        ...

    def skipping_locked(self, query: T) -> T:
        """``query``, locking its rows for this transaction and passing over rows that
        another transaction holds (maintenance and operations use it)."""
        ...


def _stamp_instances(rows: list[Message], stamp: Stamp) -> None:
    for message in rows:
        message.state, message.owner, message.lease_token = (
            State.CLAIMED, stamp.owner, stamp.token)
        message.visible_at, message.claimed_at = stamp.lease_end, stamp.now
        message.attempts += 1


class RowLockingEngine:
    """MariaDB/MySQL and PostgreSQL: ``SELECT ... FOR UPDATE SKIP LOCKED``, then an
    UPDATE by primary key, so concurrent claimers never wait on each other."""

    resumes_claims = True

    def claim(self, db: str, queue: Queue, want: int, stamp: Stamp,
              where: Q | None) -> list[Message]:
        rows = lock_ready(db, queue.pk, want, where)
        if rows:
            stamp_claimed(db, [m.pk for m in rows], owner=stamp.owner, token=stamp.token,
                          lease_end=stamp.lease_end, now=stamp.now)
        return rows

    def candidates(self, db: str, queue: Queue, want: int, where: Q | None) -> list[Message]:
        return lock_ready(db, queue.pk, want, where)

    def stamp(self, db: str, rows: list[Message], stamp: Stamp) -> None:
        if rows:
            stamp_claimed(db, [m.pk for m in rows], owner=stamp.owner, token=stamp.token,
                          lease_end=stamp.lease_end, now=stamp.now)
            _stamp_instances(rows, stamp)

    def skipping_locked(self, query: T) -> T:
        return query.select_for_update(skip_locked=True)


class SerialEngine:
    """SQLite: writers are serialised, so a claim is one UPDATE of the first ``want``
    ready rows, stamped with a fresh lease token and read back by it."""

    resumes_claims = False

    def claim(self, db: str, queue: Queue, want: int, stamp: Stamp,
              where: Q | None) -> list[Message]:
        if where is None:
            return stamp_first_ready(db, queue.pk, want, owner=stamp.owner, token=stamp.token,
                                     lease_end=stamp.lease_end, now=stamp.now)
        ready = Message.objects.using(db).filter(queue=queue, state=State.READY).filter(where)
        count = Message.objects.using(db).filter(
            pk__in=ready.claim_order().values("pk")[:want]).update(
            attempts=F("attempts") + 1, state=State.CLAIMED, owner=stamp.owner,
            lease_token=stamp.token, visible_at=stamp.lease_end, claimed_at=stamp.now)
        if not count:
            return []
        return list(Message.objects.using(db).filter(
            state=State.CLAIMED, lease_token=stamp.token, queue=queue).claim_order())

    def candidates(self, db: str, queue: Queue, want: int, where: Q | None) -> list[Message]:
        ready = Message.objects.using(db).filter(queue=queue, state=State.READY)
        if where is not None:
            ready = ready.filter(where)
        return list(ready.claim_order()[:want])  # this transaction is the only writer

    def stamp(self, db: str, rows: list[Message], stamp: Stamp) -> None:
        if rows:
            Message.objects.using(db).filter(pk__in=[m.pk for m in rows]).update(
                attempts=F("attempts") + 1, state=State.CLAIMED, owner=stamp.owner,
                lease_token=stamp.token, visible_at=stamp.lease_end, claimed_at=stamp.now)
            _stamp_instances(rows, stamp)

    def skipping_locked(self, query: T) -> T:
        return query  # one writer at a time: there is nothing to skip


ROW_LOCKING = RowLockingEngine()
SERIAL = SerialEngine()


def engine_for(conn: BaseDatabaseWrapper | None = None) -> ClaimEngine:
    """The engine of ``conn`` (default: djqueue's database)."""
    return ROW_LOCKING if dialects.claims_by_skip_locked(conn) else SERIAL
