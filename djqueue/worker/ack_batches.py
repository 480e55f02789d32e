"""What a worker's handlers finished, until it is settled in the database.

Acks wait (at most ``ACK_DELAY`` seconds, or until a batch's worth is done)
for the worker's next claim, so that one transaction and one commit settle a
finished batch and take the next one; failures and postponements are settled one
by one, at once.

Results are settled on the database their message came from. A database that is
left alone after a failure (djqueue.worker.database_pacing: its server is down, a
failover is under way) keeps its results here, unsettled, until it answers again;
the other databases' results are settled meanwhile, and none of them waits for it.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError

from djqueue.exceptions import NotOwner, QueueNotFound
from djqueue.models import Message, State
from djqueue.models.message import exception_line
from djqueue.storage import fastpath, placement
from djqueue.storage.claims import ack_on
from djqueue.storage.queue_lookup import get_queue_by_id
from djqueue.storage.transitions import fail, release
from djqueue.types import AckHook
from djqueue.worker.database_pacing import DatabasePacing

logger = logging.getLogger("djqueue.worker")
#: Seconds a finished message may wait for the next claim to carry its ack.
ACK_DELAY = 0.1


@dataclass(slots=True)
class Done:
    """What became of one message's handler run (made once per message on a handler
    thread, then only read: not frozen, as a frozen dataclass's fields cost 0.84 µs a
    message to set, against 0.21 µs here)."""

    message: Message
    error: str | None = None
    #: The ack already happened (exactly-once mode acks inside the handler's transaction).
    acked: bool = False
    #: The lease was lost before the handler could run (exactly-once mode), or the
    #: delivery was stale and skipped (``Queue.skip_stale``).
    lost: bool = False
    #: The handler raised UnprocessableMessage: dead-letter it now, without retries.
    dead: bool = False
    #: The failed run asked for its retry after these seconds (RetryAfter), not the backoff.
    retry_delay: float | None = None
    #: The handler postponed its message (Postpone): released, visible again after these
    #: seconds, the delivery uncounted.
    postponed: float | None = None
    at: float = field(default_factory=time.monotonic)

    @property
    def to_ack(self) -> bool:
        return self.error is None and self.postponed is None and not (self.acked or self.lost)


@dataclass
class WorkerStats:
    claimed: int = 0
    acked: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0
    #: Handler runs that postponed their message (Postpone).
    postponed: int = 0
    #: Claims that failed (the worker logged each, paused and went on).
    claim_errors: int = 0
    #: Claim rounds run (each one transaction a database, taking and acking).
    claims: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def processed(self) -> int:
        return self.acked + self.failed + self.lost + self.postponed

    def __str__(self) -> str:
        """The counts as the worker's last log line gives them (``started`` is a clock
        reading, so the line gives the seconds since)."""
        return (f"{time.monotonic() - self.started:.1f} s, {self.claimed} claimed in "
                f"{self.claims} claims ({self.claim_errors} failed), {self.acked} acked, "
                f"{self.failed} failed, {self.postponed} postponed, {self.released} released, "
                f"{self.lost} lost")


class AckBatches:
    """Handler threads ``add``; the worker's loop thread does everything else."""

    def __init__(self, worker_id: str, stats: WorkerStats,
                 forget: Callable[[Message], None], hook: AckHook | None = None,
                 pacing: DatabasePacing | None = None) -> None:
        self.worker_id, self.stats, self._forget, self._hook = worker_id, stats, forget, hook
        #: The worker's: which databases are left alone after a failure (its claims'
        #: and these settlements').
        self.pacing = pacing or DatabasePacing()
        self._done: collections.deque[Done] = collections.deque()
        #: Collected from the handler threads and not yet settled.
        self.unflushed: list[Done] = []
        #: How many results the loop thread waits for before it has work to do.
        self.wake_at = 1

    def add(self, done: Done) -> bool:
        """Keep ``done`` (from any thread). True when the loop thread should be woken:
        at the count it waits for, for the first result, and for a failure or a
        postponement (settled at once). A result already settled (acked in its
        handler's transaction, or lost) waits for the count like one to ack:
        exactly-once runs woke the loop for every message, whose pass cost more CPU
        than the run (2026-11-28)."""
        self._done.append(done)  # deque.append is thread-safe
        pending = len(self._done) + len(self.unflushed)
        return (pending >= self.wake_at or pending == 1 or done.error is not None
                or done.postponed is not None)

    def wait_for(self, more: int) -> bool:
        """Ask to be woken once ``more`` results beyond those collected are in; True if
        uncollected ones already make that count (the caller should not sleep)."""
        self.wake_at = len(self.unflushed) + more
        return bool(self._done) and len(self._done) + len(self.unflushed) >= self.wake_at

    def __bool__(self) -> bool:
        return bool(self._done or self.unflushed)

    def collect(self) -> None:
        while self._done:
            self.unflushed.append(self._done.popleft())

    def acks(self) -> list[Message]:
        """The finished messages waiting to be acked."""
        return [d.message for d in self.unflushed if d.to_ack]

    def due(self, batch_size: int) -> float | None:
        """When the unflushed results must be settled without waiting for a claim:
        a monotonic time (now, for a batch's worth or a failure), or None."""
        settling = self._settling()
        if not settling:
            return None
        if len(settling) >= batch_size or any(
                d.error is not None or d.postponed is not None for d in settling):
            return time.monotonic()
        return min(d.at for d in settling) + ACK_DELAY

    def _settling(self) -> list[Done]:
        """The unflushed results whose databases may be settled on now."""
        left_alone = self.pacing.left_alone() if self.unflushed else ()
        if not left_alone:  # as a rule: no result is looked at
            return self.unflushed
        return [d for d in self.unflushed
                if placement.database_of(d.message) not in left_alone]

    def acked(self, acks: list[Message], acked: list[Message]) -> None:
        """Account for ``acks`` after an ack that succeeded for ``acked``."""
        # By identity: ids are per database, and a worker may serve several.
        done = {id(m) for m in acked}
        self.stats.acked += len(done)
        for message in acks:
            if id(message) not in done:
                self.stats.lost += 1
                logger.warning("Message %s finished after its lease was lost; it will run again",
                               message.pk, extra={"worker": self.worker_id,
                                                  "message_id": message.pk})
            self._forget(message)
        settled = {id(m) for m in acks}
        self.unflushed = [d for d in self.unflushed if id(d.message) not in settled]

    def flush(self) -> dict[str, DatabaseError]:
        """Ack in a batch and record failures, on each database that may be settled on.
        A database whose statement fails keeps its results for a later flush and is
        left alone (logged once a pause); the others' are settled. Returns the errors
        by database."""
        self.collect()
        settling = self._settling()
        failed: dict[str, DatabaseError] = {}
        by_database: dict[str, list[Message]] = {}
        for done in settling:
            if done.to_ack:
                by_database.setdefault(placement.database_of(done.message), []).append(
                    done.message)
        for db, acks in by_database.items():
            try:
                self.acked(acks, ack_on(db, acks, owner=self.worker_id, hook=self._hook))
            except DatabaseError as exc:
                failed[db] = exc
        answered = by_database.keys() - failed.keys()
        settled = set()
        for done in settling:
            if done.to_ack:  # acked above (and gone from unflushed), or kept: its ack failed
                continue
            db = placement.database_of(done.message)
            if db in failed:  # kept for a later flush
                continue
            if done.error is not None or done.postponed is not None:
                try:
                    self._settle_unacked(done)
                except DatabaseError as exc:
                    failed[db] = exc
                    continue
                answered.add(db)
            elif done.acked:
                self.stats.acked += 1
            else:
                self.stats.lost += 1
            settled.add(id(done))
            self._forget(done.message)
        self.unflushed = [d for d in self.unflushed if id(d) not in settled]
        for db in answered - failed.keys():  # a failure's series ends where it answered
            self.pacing.answered(db)
        for db, error in failed.items():
            logger.error("Recording results on database %s failed; leaving it for %g s", db,
                         self.pacing.failed(db), exc_info=error,
                         extra={"worker": self.worker_id, "database": db})
        return failed

    def _settle_unacked(self, done: Done) -> None:
        """Record a failure or release a postponement. A DatabaseError is raised (the
        flush is tried again); any other error leaves the message to its lease's expiry,
        whence the reaper returns it (an error there is counted on its queue)."""
        message = done.message
        try:
            row = settle_unacked(done)
        except NotOwner:
            self.stats.lost += 1
            return
        except DatabaseError:
            raise
        except Exception:
            logger.exception("Settling the run of message %s failed", message.pk,
                             extra={"worker": self.worker_id, "message_id": message.pk})
            self.stats.lost += 1
            return
        if done.error is None:
            self.stats.postponed += 1
            return
        self.stats.failed += 1
        log_failure(row, done.error, extra={"worker": self.worker_id, "message_id": message.pk,
                                            "error": done.error[-500:]})


def log_failure(row: Message, error: str, extra: dict[str, object]) -> None:
    """Say what became of a failed run, as a reader of the worker's log needs it: the
    queue, the attempt, the retry's wait or the dead-letter queue, and the error's last
    line (the exception; the whole traceback is in the message's errors). A retry is a
    WARNING; a dead letter, the end of the message's runs, an ERROR."""
    db = fastpath.database_of(row)
    said = exception_line(error)[:300]
    if row.state == State.DEAD:
        origin = _queue_name(row.origin_queue_id or row.queue_id, db)
        kept = _queue_name(row.queue_id, db)
        where = f"dead-lettered to {kept}" if kept != origin else "dead-lettered in its queue"
        logger.error("Message %s of %s failed on attempt %s and was %s: %s", row.pk, origin,
                     row.attempts, where, said, extra=extra)
        return
    # The wait decided: from the failure's time, recorded with its error (record_failure
    # appended it: the list is never empty here), to the retry.
    failed_at = datetime.fromisoformat((row.errors or [{}])[-1]["at"])
    wait = (row.visible_at - failed_at).total_seconds()
    logger.warning("Message %s of %s failed on attempt %s; retrying in %.1f s: %s", row.pk,
                   _queue_name(row.queue_id, db), row.attempts, wait, said, extra=extra)


def _queue_name(pk: int, db: str | None) -> str:
    try:
        return get_queue_by_id(pk, db).name
    except QueueNotFound:  # deleted meanwhile: the log line must not fail the settlement
        return f"queue #{pk}"


def settle_unacked(done: Done) -> Message:
    """Settle a run that ends without an ack: a failure is recorded (retried after the
    delay it asked for, else the queue's backoff step, or dead-lettered) and a
    postponed message is released for its delay. Returns the message's row as left
    (a dead letter's in its dead-letter queue); NotOwner if its lease was lost."""
    if done.error is not None:
        return fail(done.message, done.error, delay=done.retry_delay, dead_letter=done.dead)
    if not release([done.message], delay=done.postponed):
        raise NotOwner(f"Message {done.message.pk} is no longer leased to this receiver.")
    return done.message
