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

A rate per group key (``group_rate_limit``): each key's bucket is in its
MessageGroup row, and a key with no token left is marked ``throttled_until``
the next one::

    SELECT ... FROM djqueue_message m
     WHERE queue_id = %s AND state = 1
       AND NOT EXISTS (SELECT 1 FROM djqueue_messagegroup g
                        WHERE g.queue_id = m.queue_id AND g.key = m.group_key
                          AND g.throttled_until > <database clock>)
     ORDER BY priority DESC, id LIMIT %s FOR UPDATE SKIP LOCKED;
    INSERT INTO djqueue_messagegroup ... ON CONFLICT/DUPLICATE KEY UPDATE ...;  -- lock the keys
    -- per key, in claim order: a message starts if the key's bucket has a token
    UPDATE djqueue_messagegroup SET tokens = CASE ..., throttled_until = CASE ... ;

Where a key's bucket is smaller than the claim, the candidates hold at most
the bucket's size of each key (_candidates_across_keys: the SELECT above reads
ids and keys without a lock, and the chosen rows are locked by primary key),
so keys whose messages lie one after another are claimed side by side.

A flooding key's messages are passed over by the filter while it waits for a
token, so the other keys' messages behind them are claimed at once; the
filter reads committed marks only as a shortcut, and the decision is made on
the locked rows.

At most so many messages of one key in flight (``group_concurrency``) is not
decided here: like an ordered queue's "one at a time", a key's messages past
its limit wait in state WAITING (djqueue.storage.ordered_groups), so the
claim, which sees READY rows only, needs no check at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connections
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.utils import timezone

from djqueue import rates
from djqueue.models import Message, MessageGroup, Queue, QueueLimiter, State
from djqueue.storage import dialects
from djqueue.storage.claim_engines import ClaimEngine, Stamp
from djqueue.storage.ordered_groups import lock_groups
from djqueue.storage.statements import limit_statements, vendor_sql
from djqueue.storage.statements.limit_statements import LimiterRow

#: The longest a key is marked throttled before a claim looks at its bucket again.
MARK_AT_MOST = 3600.0
#: A claim under a per-key rate looks at this many candidates more than it may take,
#: for each it may take (up to KEY_WINDOW_MOST more in all).
KEY_WINDOW = 2
KEY_WINDOW_MOST = 200
#: How many ready messages such a claim reads (ids and keys) to choose them from.
KEY_SCAN = 256
#: The longest a concurrency limit goes on its bound of claimed rows without counting
#: them (seconds): the bound keeps exactness, a count brings it back down to the truth.
RECOUNT_EVERY = 1.0
#: How soon a claimer that found another one deciding a limited queue looks again.
BUSY_RETRY = 0.005


class LimitWait:
    """What a claim learnt of its queues' limits: the soonest one may let more start.

    A worker whose claim came up short sleeps no longer than this, so a rate
    limit is used to the full without polling faster than its tokens arrive.
    """

    def __init__(self) -> None:
        self.seconds: float | None = None

    def clear(self) -> None:
        self.seconds = None

    def note(self, seconds: float) -> None:
        if math.isfinite(seconds) and (self.seconds is None or seconds < self.seconds):
            self.seconds = max(0.0, seconds)


def clock(db: str) -> RawSQL:
    """The database server's clock, in epoch seconds, as an expression."""
    return RawSQL(vendor_sql.clock_sql(connections[db].vendor), ())


class _Budget(NamedTuple):
    limiter: LimiterRow
    allowed: int
    bucket: rates.Bucket | None


#: Claims up to n ready messages of a queue the plain way (claims._claim_queue).
Take = Callable[[Queue, int], list[Message]]


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
    holds from the next claim, not when the process's cached queue row expires."""
    limiter = _lock_limiter(db, queue, first_lock)
    if limiter is None:  # another claimer is deciding this queue now
        if wait is not None:
            wait.note(BUSY_RETRY)
        return []
    queue = _with_limits(queue, limiter)
    budget = _queue_budget(db, queue, limiter, want)
    rows: list[Message] = []
    if budget.allowed > 0:
        if queue.group_rate() is not None:
            rows = _claim_within_key_budgets(db, queue, budget.allowed, engine, stamp, where,
                                             wait)
        else:
            rows = take(queue, budget.allowed)
    _spend(db, queue, budget, len(rows), want, stamp.now, wait)
    return rows


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


def _claim_within_key_budgets(db: str, queue: Queue, allowed: int, engine: ClaimEngine,
                              stamp: Stamp, where: Q | None,
                              wait: LimitWait | None) -> list[Message]:
    """Claim up to ``allowed``, each keyed message taking a token of its key's bucket.

    The claim looks at more candidates than it may take (KEY_WINDOW), so that it
    fills up from the keys behind one that has just run out of tokens. Why one
    window, not rounds: the keys' rows are then locked once, in key order, and
    two claimers can never wait on each other's keys in a cycle (PostgreSQL
    would find such a deadlock only after its deadlock_timeout, a second).
    """
    rate, burst = queue.group_rate(), queue.group_burst()
    assert rate is not None
    unthrottled = unthrottled_keys(db, queue)
    window = allowed + min(KEY_WINDOW * allowed, KEY_WINDOW_MOST)
    ready = unthrottled if where is None else where & unthrottled
    # A key gives at most its bucket's size a claim: the candidates take no more of it,
    # so that keys whose messages lie one after another are claimed side by side.
    per_key = min(burst, allowed)
    if per_key >= window:
        candidates = engine.candidates(db, queue, window, ready)
    else:
        candidates = _candidates_across_keys(db, queue, window, per_key, ready, engine)
    keys = sorted({m.group_key for m in candidates if m.group_key})
    groups: dict[str, MessageGroup] = {}
    buckets: dict[str, rates.Bucket] = {}
    if keys:
        lock_groups(db, [(queue.pk, key) for key in keys])
        for group in (MessageGroup.objects.using(db)
                      .filter(queue_id=queue.pk, key__in=keys).annotate(clock=clock(db))):
            groups[group.key] = group
            buckets[group.key] = rates.refilled(
                rates.Bucket(group.tokens, group.refilled_at), rate, burst, group.clock)
    chosen: list[Message] = []
    for message in candidates:
        if len(chosen) == allowed:
            break
        key = message.group_key
        if not key:
            chosen.append(message)
        elif rates.whole_tokens(buckets[key]) >= 1:
            buckets[key] = rates.Bucket(buckets[key].tokens - 1, buckets[key].at)
            chosen.append(message)
    _mark_keys(db, groups, buckets, rate, wait)
    engine.stamp(db, chosen, stamp)
    return chosen


def unthrottled_keys(db: str, queue: Queue) -> Q:
    """``queue``'s messages whose key is not marked as waiting for its next token.

    MariaDB turns the NOT EXISTS into an anti-join against the marked keys, read
    once a claim: by index djqueue_group_throttled, the keys marked until later (a
    range), not every key of every queue (tests/storage/test_explain.py). The queue
    is named as a constant so that the read keeps to its keys.
    """
    throttled = MessageGroup.objects.using(db).filter(
        queue_id=queue.pk, key=OuterRef("group_key"), throttled_until__gt=clock(db))
    return ~Q(Exists(throttled))


def key_scan(db: str, queue: Queue, ready: Q) -> QuerySet[Message, tuple[int, str | None]]:
    """The ids and keys of ``queue``'s ready messages under ``ready``, in claim order
    (by the claim index: tests/storage/test_explain.py)."""
    return (Message.objects.using(db).filter(queue_id=queue.pk, state=State.READY)
            .filter(ready).claim_order().values_list("pk", "group_key"))


def _candidates_across_keys(db: str, queue: Queue, window: int, per_key: int, ready: Q,
                            engine: ClaimEngine) -> list[Message]:
    """Up to ``window`` ready messages, at most ``per_key`` of each group key, held as
    :meth:`ClaimEngine.candidates` holds them.

    The next KEY_SCAN ready messages are read without a lock (their ids and keys, by
    the claim index), chosen from in claim order, and the chosen locked by primary
    key, passing over any that another claimer took meanwhile. Without the spread,
    a window of messages of one key gave one message a claim: 19 keys of 20
    messages each at 5/s a key were claimed at ~60 a second, not 95.
    """
    scanned = key_scan(db, queue, ready)[:max(window, KEY_SCAN)]
    taken: dict[str, int] = {}
    chosen: list[int] = []
    for pk, key in scanned:
        if key:
            if taken.get(key, 0) >= per_key:
                continue
            taken[key] = taken.get(key, 0) + 1
        chosen.append(pk)
        if len(chosen) == window:
            break
    if not chosen:
        return []
    held = Message.objects.using(db).filter(pk__in=chosen, state=State.READY).claim_order()
    return list(engine.skipping_locked(held))


def _mark_keys(db: str, groups: dict[str, MessageGroup], buckets: dict[str, rates.Bucket],
               rate: rates.Rate, wait: LimitWait | None) -> None:
    """Store the keys' buckets, marking the keys without a token until their next one."""
    if not groups:
        return
    now = timezone.now()
    for key, group in groups.items():
        bucket = buckets[key]
        group.tokens, group.refilled_at = bucket
        next_token = rates.seconds_to_next_token(bucket, rate)
        # The mark is a shortcut for the claim's filter (the decision is made on the
        # locked row), so a key of a rate of 0 is simply looked at again hourly.
        group.throttled_until = bucket.at + min(next_token, MARK_AT_MOST) if next_token else None
        if wait is not None and next_token:
            wait.note(next_token)
        group.touched_at = now
    MessageGroup.objects.using(db).bulk_update(
        list(groups.values()), ["tokens", "refilled_at", "throttled_until", "touched_at"])
