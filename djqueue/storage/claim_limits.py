"""Claiming from a queue with limits: its rate, its concurrency, and a rate per group key.

Every limit is decided inside the claim's own short transaction, on rows that
the claim locks first, so that claimers on any number of threads, processes
and hosts decide one after another and none can claim past a limit.

A queue's rate and concurrency (``rate_limit``, ``concurrency_limit``)::

    SELECT tokens, refilled_at, <database clock> FROM djqueue_queuelimiter
     WHERE queue_id = %s FOR UPDATE;               -- claimers of the queue queue up here
    SELECT COUNT(*) FROM djqueue_message
     WHERE queue_id = %s AND state = 3;             -- claimed now (index djqueue_msg_claim)
    -- claim min(want, limit - claimed, whole tokens) as an unlimited claim would
    UPDATE djqueue_queuelimiter SET tokens = %s, refilled_at = %s WHERE queue_id = %s;
    COMMIT;                                          -- the next claimer counts our claims

The count is exact because the lock is taken before it and held until the
claims are committed, and every claim statement reads committed rows (READ
COMMITTED, see dialects.claim_isolation; SQLite has one writer at a time). The
concurrency limit keeps no counter of its own: the claimed rows are the count,
so a worker killed while holding messages leaks nothing, and its slots come
back when the reaper returns its claims. The rate is a token bucket
(djqueue.rates) on the database server's clock, which every host shares.

A rate per group key (``group_rate_limit``) is decided in
djqueue.storage.key_rate_claims, within the queue's own budget.

At most so many messages of one key in flight (``group_concurrency``) is not
decided here: like an ordered queue's "one at a time", a key's messages past
its limit wait in state WAITING (djqueue.storage.ordered_groups), so the
claim, which sees READY rows only, needs no check at all.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import Q
from django.db.models.signals import post_save
from django.dispatch import receiver

from djqueue import rates
from djqueue.models import Message, Queue, QueueLimiter, State
from djqueue.rates import LimitWait
from djqueue.storage import dialects
from djqueue.storage.claim_engines import ClaimEngine, Stamp
from djqueue.storage.key_rate_claims import claim_within_key_budgets
from djqueue.storage.statements import limit_statements
from djqueue.storage.statements.limit_statements import LimiterRow

#: The longest a concurrency limit goes on its bound of claimed rows without counting
#: them (seconds): the bound keeps exactness, a count brings it back down to the truth.
RECOUNT_EVERY = 1.0
#: How soon a claimer that found another one deciding a limited queue looks again.
BUSY_RETRY = 0.005


class _Budget(NamedTuple):
    limiter: LimiterRow
    allowed: int
    bucket: rates.Bucket | None


#: Claims up to n ready messages of a queue the plain way (claims._claim_queue), stamped
#: as claimed at the given time.
Take = Callable[[Queue, int, datetime], list[Message]]


def claim_limited(db: str, queue: Queue, want: int, *, engine: ClaimEngine, stamp: Stamp,
                  where: Q | None, wait: LimitWait | None, first_lock: bool,
                  take: Take) -> list[Message]:
    """Claim up to ``want`` ready messages of ``queue`` within its limits (see the module
    docstring); the rows come back stamped. ``take`` claims the allowed number the
    way an unlimited queue would. ``first_lock``: no other queue's limiter is
    locked in this transaction yet, so this one may be waited for; otherwise a
    limiter held by another claimer is passed over, and two claimers taking two
    limited queues in opposite orders cannot deadlock.

    The limits are read from the limiter row's copy, under its lock, so a change
    holds from the next claim, not when the process's cached queue row expires.

    The rows are stamped claimed at the limiter's clock reading, the time their tokens
    are taken, not at the claim's start: the claim may have waited for the lock, and
    the claim times would then bunch where the tokens did not, more than the rate's
    N + B - 1 in a window of one period (56 of 50/s with a burst of 5, in a CI run)."""
    limiter = _lock_limiter(db, queue, first_lock)
    if limiter is None:  # another claimer is deciding this queue now
        if wait is not None:
            wait.note(BUSY_RETRY)
        return []
    stamp = _at_clock(stamp, limiter.clock)
    queue = _with_limits(queue, limiter)
    budget = _queue_budget(db, queue, limiter, want)
    rows: list[Message] = []
    if budget.allowed > 0:
        if queue.group_rate() is not None:
            rows = claim_within_key_budgets(db, queue, budget.allowed, engine, stamp, where,
                                            wait)
        else:
            rows = take(queue, budget.allowed, stamp.now)
    _spend(db, queue, budget, len(rows), want, stamp.now, wait)
    return rows


def _at_clock(stamp: Stamp, clock: float) -> Stamp:
    """``stamp`` moved to the database clock's reading ``clock`` (seconds since the
    epoch), its lease end by as much: the lease runs from the claim."""
    at = datetime.fromtimestamp(clock, tz=stamp.now.tzinfo)
    return Stamp(stamp.owner, stamp.token, stamp.lease_end + (at - stamp.now), at)


def _with_limits(queue: Queue, limiter: LimiterRow) -> Queue:
    """A copy of the (cached) ``queue`` with the limits its limiter row holds now (a
    shallow copy of its fields: ``copy.copy`` of a model instance costs ten times more)."""
    fresh = Queue.__new__(Queue)
    fresh.__dict__ = {**queue.__dict__,
                      **{name: getattr(limiter, name) for name in QueueLimiter.COPIED}}
    return fresh


def _queue_budget(db: str, queue: Queue, limiter: LimiterRow, want: int) -> _Budget:
    """How many may start now, by the queue's concurrency limit and rate."""
    allowed = want
    limit = queue.concurrency_limit
    if limit is not None:
        bound = limiter.claimed_bound
        if (bound < 0 or bound + want > limit
                or not 0 <= limiter.clock - limiter.counted_at < RECOUNT_EVERY):
            bound = limiter.claimed_bound = limit_statements.count_claimed(db, queue.pk)
            limiter.counted_at = limiter.clock
        allowed = min(allowed, max(0, limit - bound))
    bucket = None
    rate = queue.rate()
    if rate is not None:
        bucket = rates.refilled(rates.Bucket(limiter.tokens, limiter.refilled_at), rate,
                                queue.burst(), limiter.clock)
        allowed = min(allowed, rates.whole_tokens(bucket))
    return _Budget(limiter, allowed, bucket)


def _lock_limiter(db: str, queue: Queue, wait_for_it: bool) -> LimiterRow | None:
    limiter = limit_statements.lock_limiter(db, queue.pk, skip_locked=not wait_for_it)
    if limiter is None and not QueueLimiter.objects.using(db).filter(queue_id=queue.pk).exists():
        copy_limits(db, queue, create_only=True)  # a queue limited before its row existed
        limiter = limit_statements.lock_limiter(db, queue.pk, skip_locked=not wait_for_it)
    return limiter


def copy_limits(db: str, queue: Queue, *, create_only: bool = False) -> None:
    """Write ``queue``'s limits into its limiter row (creating it), for the claims."""
    values = {name: getattr(queue, name) for name in QueueLimiter.COPIED}
    if create_only:
        QueueLimiter.objects.using(db).bulk_create([QueueLimiter(queue_id=queue.pk, **values)],
                                                   ignore_conflicts=True)
    elif (not QueueLimiter.objects.using(db).filter(queue_id=queue.pk).update(
            **values, claimed_bound=-1)  # a changed limit counts the claimed rows afresh
          and queue.limits_claims):
        copy_limits(db, queue, create_only=True)


@receiver(post_save, sender=Queue)
def _copy_saved_limits(sender: type[Queue], instance: Queue, raw: bool = False,
                       using: str | None = None, **kwargs: Any) -> None:
    """Every save of a queue row (create_queue, set_limits, the admin) copies its limits."""
    if not raw:
        copy_limits(using or dialects.alias(), instance)


def _spend(db: str, queue: Queue, budget: _Budget, started: int, want: int, now: datetime,
           wait: LimitWait | None) -> None:
    """Take the started messages' tokens and keep the limit's figures (one UPDATE, only
    when something changed)."""
    limiter = budget.limiter
    changed: list[str] = []
    if queue.concurrency_limit is not None:
        limiter.claimed_bound += started
        changed += ["claimed_bound", "counted_at"]
    rate = queue.rate()
    if budget.bucket is not None and rate is not None:
        bucket = rates.Bucket(budget.bucket.tokens - started, budget.bucket.at)
        limiter.tokens, limiter.refilled_at = bucket
        changed += ["tokens", "refilled_at"]
        if wait is not None and started < want:
            wait.note(rates.seconds_to_next_token(bucket, rate))
    held_back = budget.allowed < want and (
        started == budget.allowed if started else _any_ready(db, queue.pk))
    if held_back:
        limiter.held_back += 1
        changed.append("held_back")
        if limiter.throttled_since is None:
            limiter.throttled_since = now.timestamp()
            changed.append("throttled_since")
    elif limiter.throttled_since is not None:
        limiter.throttled_seconds += max(0.0, now.timestamp() - limiter.throttled_since)
        limiter.throttled_since = None
        changed += ["throttled_seconds", "throttled_since"]
    if changed:
        limit_statements.update_limiter(db, limiter.queue_id,
                                        {name: getattr(limiter, name) for name in changed})


def _any_ready(db: str, queue_id: int) -> bool:
    return Message.objects.using(db).filter(queue_id=queue_id, state=State.READY).exists()
