"""A worker's claims on each database its queues live on, each one on its own.

A worker may serve queues on several databases (djqueue.storage.placement). Each
claim goes to one database with that database's finished messages, so the
acks that ride along commit where their rows are. A database that fails its
claim (its server is down, a failover is under way) is left alone for a
growing pause while the others go on; its finished messages wait, unacked, for
its return, and its claims come back to whoever serves it once their leases
end. Which databases a round visits is their pacing's
(djqueue.worker.database_pacing): not one left alone after a failed claim, and,
when there are several, those named by a wake-up, those with acks to settle, and
those whose own backoff has run out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from django.db.models import Q

from djqueue.models import Message, Queue
from djqueue.rates import LimitWait
from djqueue.storage.claims import by_database
from djqueue.storage.failure_streaks import FailureStreaks
from djqueue.storage.receiver_claims import PromotionClock, claim_ready
from djqueue.types import AckHook
from djqueue.worker.database_pacing import DatabasePacing

logger = logging.getLogger("djqueue.worker")


class Claimed:
    """What one round of claims did: acked, claimed, and the acks that were not tried."""

    def __init__(self) -> None:
        self.acked: list[Message] = []
        self.tried: list[Message] = []
        self.messages: list[Message] = []
        self.failed = 0


class DatabaseClaims:
    def __init__(self, worker_id: str, *, visibility_timeout: float | None, where: Q | None,
                 hook: AckHook | None, on_error: Callable[[str, Exception], None]) -> None:
        self.worker_id = worker_id
        self.visibility_timeout = visibility_timeout
        self.where = where
        self.hook = hook
        self.on_error = on_error
        self.promotion = PromotionClock()
        #: How soon a limited queue may let more start (claim_limits): the idle sleep's cap.
        self.limit_wait = LimitWait()
        self.pacing = DatabasePacing()
        #: Each database's failed claims, logged as a streak (an outage is a line each 10 s).
        self._failures = FailureStreaks(logger, "Claim on database {}",
                                       {"worker": worker_id}, "database")

    def claim(self, queues: Sequence[Queue], acks: list[Message], limit: int, *,
              peek: bool) -> Claimed:
        """Claim up to ``limit`` from ``queues`` (earlier queues' databases first), acking
        ``acks`` on their databases in the same transactions."""
        self.limit_wait.clear()
        round_ = Claimed()
        found = by_database(queues, acks)
        due = self.pacing.due(found.keys(), [db for db, (_, settling) in found.items() if settling])
        for db, (on_db, acks_on_db) in found.items():
            if db not in due:
                continue
            wait = LimitWait()
            asked = max(limit - len(round_.messages), 0)
            try:
                acked, messages = claim_ready(
                    on_db, asked, owner=self.worker_id,
                    visibility_timeout=self.visibility_timeout, clock=self.promotion,
                    where=self.where, peek=peek, acks=acks_on_db, hook=self.hook, wait=wait)
            except Exception as exc:  # the worker outlives any one failed claim
                round_.failed += 1
                self._failed(db, exc)
                continue
            self._failures[db].succeeded()
            self.pacing.claimed(db, several=len(found) > 1, asked=asked, found=len(messages),
                                acked=bool(acks_on_db))
            if wait.seconds is not None:
                self.limit_wait.note(wait.seconds)
            round_.acked += acked
            round_.tried += acks_on_db
            round_.messages += messages
        return round_

    def _failed(self, db: str, exc: Exception) -> None:
        pause = self.pacing.failed(db)
        self._failures[db].failed(exc, f"leaving it for {pause:g} s")
        self.on_error(db, exc)  # the worker counts it, and drops a broken connection
