"""Claiming under a rate per group key (``group_rate_limit``), inside a claim of
djqueue.storage.claim_limits (which has taken the queue's own budget first).

Each key's bucket is in its MessageGroup row, and a key with no token left is
marked ``throttled_until`` the next one::

    SELECT ... FROM djqueue_message m
     WHERE queue_id = %s AND state = 1
       AND NOT EXISTS (SELECT 1 FROM djqueue_messagegroup g
                        WHERE g.queue_id = %s AND g.key = m.group_key
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
"""

from __future__ import annotations

from django.db import connections
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL

from djqueue import rates
from djqueue.models import Message, MessageGroup, Queue, State
from djqueue.rates import LimitWait
from djqueue.storage import host_clock
from djqueue.storage.claim_engines import ClaimEngine, Stamp
from djqueue.storage.ordered_groups import lock_groups
from djqueue.storage.statements import vendor_sql

#: The longest a key is marked throttled before a claim looks at its bucket again.
MARK_AT_MOST = 3600.0
#: A claim under a per-key rate looks at this many candidates more than it may take,
#: for each it may take (up to KEY_WINDOW_MOST more in all).
KEY_WINDOW = 2
KEY_WINDOW_MOST = 200
#: How many ready messages such a claim reads (ids and keys) to choose them from.
KEY_SCAN = 256


def clock(db: str) -> RawSQL:
    """The database server's clock, in epoch seconds, as an expression."""
    return RawSQL(vendor_sql.clock_sql(connections[db].vendor), ())


def claim_within_key_budgets(db: str, queue: Queue, allowed: int, engine: ClaimEngine,
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
    now = host_clock.database_now(db)
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
