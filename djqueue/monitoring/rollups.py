"""Statistics kept by the reaper: per-queue roll-ups by minute, hour and day, and
depth snapshots. Readers (dashboard, alarms) never count the message table.

* What happened since the last pass is counted by minute in
  djqueue.monitoring.minute_counts. Sends are counted by message-id ranges
  (primary-key range scans, one statement over pending and finished messages so a
  message moving between them mid-count is seen once).
* Acks, deletions, wait and run times come from history, by ``finished_at``
  windows that end :data:`SETTLE` in the past (an ack's time is taken before
  its commit).
* Failures and dead-letterings are counted live, in the transaction that
  records them (:func:`count_failure`), by an atomic add-to-row upsert.
* Hours and days are recomputed from their minutes (hours) and hours (days),
  so they are exact, and a late failure still reaches them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from django.db import models, transaction
from django.db.models import Count, Min, Q, QuerySet

from djqueue import histograms
from djqueue.models import (
    Message,
    Period,
    Queue,
    QueueDepth,
    QueueStat,
    State,
    StatsCursor,
    TopicStat,
)
from djqueue.models.stats import TOTAL_START
from djqueue.monitoring.minute_counts import Minute, count_finished, count_published, count_sends
from djqueue.storage import dialects, host_clock
from djqueue.storage.claim_engines import engine_for
from djqueue.storage.statements import vendor_sql
from djqueue.storage.statements.stat_counters import (
    COUNTERS,
    HISTOGRAMS,
    add_to_minutes,
    minute_of,
)
from djqueue.storage.unreadable_rows import ReadableTime, values_of

SETTLE = timedelta(seconds=5)
#: How far back the first pass on a database looks.
FIRST_LOOKBACK = timedelta(days=1)
KEEP = {Period.MINUTE: timedelta(days=2), Period.HOUR: timedelta(days=35),
        Period.DAY: timedelta(days=400)}


def hour_of(at: datetime) -> datetime:
    return minute_of(at).replace(minute=0)


def day_of(at: datetime) -> datetime:
    return hour_of(at).replace(hour=0)


def roll_up(now: datetime | None = None) -> int:
    """Count what happened since the last pass into the minute, hour and day rows.

    Returns the number of sends, finishes and publications counted. Any number
    of reapers may call it: one holds the cursor, the others return 0.
    """
    db = dialects.alias()
    now = now or host_clock.database_now(db)
    StatsCursor.objects.using(db).get_or_create(
        name="stats", defaults={"until": now - FIRST_LOOKBACK})
    with transaction.atomic(using=db):
        query = StatsCursor.objects.using(db).filter(name="stats")
        query = engine_for().skipping_locked(query)
        cursor = query.first()
        if cursor is None:
            return 0
        since, until = cursor.until, max(cursor.until, now - SETTLE)
        minutes: dict[tuple[int, datetime], Minute] = defaultdict(Minute)
        counted = count_sends(db, cursor, minutes, not_before=now - FIRST_LOOKBACK,
                              not_after=now + FIRST_LOOKBACK)
        counted += count_finished(db, since, until, minutes)
        _apply(db, minutes)
        counted += count_published(db, cursor, not_before=now - FIRST_LOOKBACK,
                                   not_after=now + FIRST_LOOKBACK)
        low = since - timedelta(minutes=1)
        _recompute(db, QueueStat, "queue_id", low, now)
        _recompute(db, TopicStat, "topic_id", low, now)
        cursor.until = until
        cursor.save(using=db)
    return counted


def _apply(db: str, minutes: dict[tuple[int, datetime], Minute]) -> None:
    add_to_minutes(db, {key: m.counters for key, m in minutes.items() if m.counters})
    timed = {key: m for key, m in minutes.items() if m.waits}
    if not timed:
        return
    queues = {q for q, _ in timed}
    rows = (QueueStat.objects.using(db).select_for_update()
            .filter(Q(period=Period.MINUTE, start__in={start for _, start in timed})
                    | Q(period=Period.TOTAL, start=TOTAL_START), queue_id__in=queues)
            .order_by("pk"))
    changed = []
    for row in rows:
        if row.period == Period.TOTAL:  # every minute of the queue adds to its total
            parts = [m for (q, _), m in timed.items() if q == row.queue_id]
        else:
            parts = [m] if (m := timed.get((row.queue_id, minute_of(row.start)))) else []
        for minute in parts:
            row.wait_hist = histograms.merge(row.wait_hist, histograms.of(minute.waits))
            row.run_hist = histograms.merge(row.run_hist, histograms.of(minute.runs))
        if parts:
            changed.append(row)
    QueueStat.objects.using(db).bulk_update(changed, HISTOGRAMS)


def _recompute(db: str, model: type[QueueStat] | type[TopicStat], owner: str, low: datetime,
               high: datetime) -> None:
    """Rebuild the hour rows of [low, high] from their minutes, then the day rows from hours."""
    for part, whole, start_of in ((Period.MINUTE, Period.HOUR, hour_of),
                                  (Period.HOUR, Period.DAY, day_of)):
        first = start_of(low)
        rows = model.objects.using(db).filter(period=part, start__gte=first, start__lte=high)
        totals = _sum_rows(model, rows, owner, start_of, whole)
        if totals:
            fields = [f for f in (*COUNTERS, *HISTOGRAMS, "published")
                      if any(f == m.name for m in model._meta.fields)]
            model.objects.using(db).bulk_create(
                totals, **vendor_sql.upsert_options([owner.removesuffix("_id"), "period", "start"],
                                                fields))


def _sum_rows(model: type[models.Model], rows: Iterable, owner: str,
              start_of: Callable[[datetime], datetime], period: str) -> list:
    merged: dict[tuple[int, datetime], models.Model] = {}
    for row in rows:
        key = (getattr(row, owner), start_of(row.start))
        total = merged.get(key)
        if total is None:
            total = merged[key] = model(**{owner: key[0]}, period=period, start=key[1])
        for name in (*COUNTERS, "published"):
            if hasattr(row, name):
                setattr(total, name, getattr(total, name) + getattr(row, name))
        for name in HISTOGRAMS:
            if hasattr(row, name):
                setattr(total, name, histograms.merge(getattr(total, name), getattr(row, name)))
    return list(merged.values())


def with_depths(queues: QuerySet[Queue]) -> QuerySet[Queue]:
    """``queues`` joined to their last depth samples, as the reports read them (the
    dashboard, ``/metrics``, ``djqueue_queues``). Without the queues' creation times,
    which no report shows: one a hand edit left unreadable failed every report of
    every queue."""
    return queues.select_related("depth").defer("created_at")


def sample_depth(queue_ids: list[int] | None = None) -> int:
    """Snapshot every queue's (or the given queues') counts by state. Returns queues sampled.

    One grouped pass over the claim index (whose leading columns are queue and
    state, and which holds the id), one lookup of each queue's first ready
    message, and one range read of the claimed messages on the due index.
    """
    db = dialects.alias()
    now = host_clock.database_now(db)
    queues = Queue.objects.using(db)
    messages = Message.objects.using(db)
    if queue_ids is not None:
        queues, messages = queues.filter(pk__in=queue_ids), messages.filter(queue_id__in=queue_ids)
    depths = {pk: QueueDepth(queue_id=pk, sampled_at=now)
              for pk in queues.values_list("pk", flat=True)}
    first_ready = []
    by_state = {State.READY: "ready", State.SCHEDULED: "scheduled", State.CLAIMED: "in_flight",
                State.WAITING: "waiting", State.DEAD: "dead"}
    for row in (messages.values("queue_id", "state").annotate(n=Count("pk"), first=Min("pk"))
                .order_by()):
        depth = depths.get(row["queue_id"])
        if depth is not None:
            setattr(depth, by_state[State(row["state"])], row["n"])
            if row["state"] == State.READY:
                first_ready.append(row["first"])
    # A head whose send time a hand edit left unreadable: its age unknown (None) until a
    # claim sets it aside (djqueue.storage.unreadable_messages).
    heads = values_of(Message.objects.using(db).filter(pk__in=first_ready), ("queue_id", "sent_at"))
    for queue_id, sent_at in heads:
        depths[queue_id].oldest_ready_at = sent_at
    for queue_id, oldest in _oldest_claims(messages.filter(state=State.CLAIMED)):
        if queue_id in depths:
            depths[queue_id].oldest_claimed_at = oldest
    fields = ["ready", "scheduled", "in_flight", "waiting", "dead", "oldest_ready_at",
              "oldest_claimed_at", "sampled_at"]
    QueueDepth.objects.using(db).bulk_create(
        list(depths.values()), **vendor_sql.upsert_options(["queue"], fields))
    return len(depths)


def _oldest_claims(claims: QuerySet[Message]) -> list[tuple[int, datetime | None]]:
    """Each queue's oldest claim time among ``claims``; unknown (None) where a hand edit
    left that time unreadable."""
    return list(claims.values("queue_id").annotate(oldest=ReadableTime(Min("claimed_at")))
                .values_list("queue_id", "oldest").order_by())


def prune(db: str, now: datetime) -> int:
    removed = 0
    for period, keep in KEEP.items():
        for model in (QueueStat, TopicStat):
            removed += model.objects.using(db).filter(period=period, start__lt=now - keep).delete()[0]
    return removed
