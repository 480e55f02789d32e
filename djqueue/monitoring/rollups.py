"""Statistics kept by the reaper: per-queue roll-ups by minute, hour and day, and
depth snapshots. Readers (dashboard, alarms) never count the message table.

* Sends are counted by message-id ranges (primary-key range scans, one
  statement over pending and finished messages so a message moving between
  them mid-count is seen once).
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
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections, models, transaction
from django.db.models import Count, F, Max, Min, Q
from django.db.models.functions import Coalesce, TruncMinute
from django.utils import timezone

from djqueue import histograms
from djqueue.models import (
    Body,
    History,
    Message,
    Outcome,
    Period,
    Queue,
    QueueDepth,
    QueueStat,
    State,
    StatsCursor,
    TopicStat,
)
from djqueue.models.stats import TOTAL_START
from djqueue.storage import dialects
from djqueue.storage.claim_engines import engine_for
from djqueue.storage.statements import vendor_sql
from djqueue.storage.statements.stat_counters import (
    COUNTERS,
    HISTOGRAMS,
    add_counters,
    add_to_minutes,
    minute_of,
)
from djqueue.storage.unreadable_rows import UNREADABLE, read_values

SETTLE = timedelta(seconds=5)
#: How far back the first pass on a database looks.
FIRST_LOOKBACK = timedelta(days=1)
KEEP = {Period.MINUTE: timedelta(days=2), Period.HOUR: timedelta(days=35),
        Period.DAY: timedelta(days=400)}


def hour_of(at: datetime) -> datetime:
    return minute_of(at).replace(minute=0)


def day_of(at: datetime) -> datetime:
    return hour_of(at).replace(hour=0)


@dataclass
class _Minute:
    counters: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    waits: list[float] = field(default_factory=list)
    runs: list[float] = field(default_factory=list)


def roll_up(now: datetime | None = None) -> int:
    """Count what happened since the last pass into the minute, hour and day rows.

    Returns the number of sends, finishes and publications counted. Any number
    of reapers may call it: one holds the cursor, the others return 0.
    """
    db = dialects.alias()
    now = now or timezone.now()
    StatsCursor.objects.using(db).get_or_create(
        name="stats", defaults={"until": now - FIRST_LOOKBACK})
    with transaction.atomic(using=db):
        query = StatsCursor.objects.using(db).filter(name="stats")
        query = engine_for().skipping_locked(query)
        cursor = query.first()
        if cursor is None:
            return 0
        since, until = cursor.until, max(cursor.until, now - SETTLE)
        minutes: dict[tuple[int, datetime], _Minute] = defaultdict(_Minute)
        counted = _count_sends(db, cursor, minutes, not_before=now - FIRST_LOOKBACK,
                               not_after=now + FIRST_LOOKBACK)
        counted += _count_finished(db, since, until, minutes)
        _apply(db, minutes)
        counted += _count_published(db, cursor, not_before=now - FIRST_LOOKBACK)
        low = since - timedelta(minutes=1)
        _recompute(db, QueueStat, "queue_id", low, now)
        _recompute(db, TopicStat, "topic_id", low, now)
        cursor.until = until
        cursor.save(using=db)
    return counted


def _count_sends(db: str, cursor: StatsCursor, minutes: dict, *, not_before: datetime,
                 not_after: datetime) -> int:
    """The sends among the ids new since the last pass, by minute. Not those sent a day
    after now: only a hand edit writes such a time, and one no driver reads back
    (PostgreSQL's 'infinity', text on SQLite that is no time) failed every pass."""
    low, high = cursor.message_id, cursor.message_seen_id
    counted = 0
    if high > low:
        def by_minute(query: models.QuerySet, queue: models.Expression | F) -> models.QuerySet:
            return (query.filter(pk__gt=low, pk__lte=high, sent_at__gte=not_before,
                                 sent_at__lt=not_after)
                    .annotate(q=queue, minute=TruncMinute("sent_at", tzinfo=UTC))
                    .values("q", "minute").annotate(n=Count("pk")).order_by())

        pending = by_minute(Message.objects.using(db), Coalesce("origin_queue_id", "queue_id"))
        finished = by_minute(History.objects.using(db), F("queue_id"))
        for row in pending.union(finished, all=True):
            if row["minute"] is None:  # SQLite's truncation of text that is no time
                continue
            minutes[(row["q"], minute_of(row["minute"]))].counters["sent"] += row["n"]
            counted += row["n"]
        cursor.message_id = high
    cursor.message_seen_id = max(
        high,
        Message.objects.using(db).aggregate(n=Max("pk"))["n"] or 0,
        History.objects.using(db).aggregate(n=Max("pk"))["n"] or 0)
    return counted


def _count_finished(db: str, since: datetime, until: datetime, minutes: dict) -> int:
    queue_ids = list(Queue.objects.using(db).values_list("pk", flat=True))
    finished = History.objects.using(db).filter(
        queue_id__in=queue_ids, finished_at__gte=since, finished_at__lt=until)
    columns = ("queue_id", "outcome", "sent_at", "claimed_at", "finished_at")
    counts: dict[tuple[int, datetime], _Minute] = defaultdict(_Minute)
    try:
        counted = _count_rows(finished.values_list(*columns).iterator(chunk_size=5000), counts)
    except UNREADABLE:  # a hand edit left a time no driver reads back: count it without
        counts = defaultdict(_Minute)
        counted = _count_rows(read_values(finished, columns), counts)
    for key, part in counts.items():  # only now: a failed read counted nothing
        minute = minutes[key]
        for name, value in part.counters.items():
            minute.counters[name] += value
        minute.waits += part.waits
        minute.runs += part.runs
    return counted


def _count_rows(rows: Iterable[tuple[Any, ...]], minutes: dict) -> int:
    counted = 0
    for queue_id, outcome, sent_at, claimed_at, finished_at in rows:
        minute = minutes[(queue_id, minute_of(finished_at))]
        counted += 1
        if outcome != Outcome.ACKED:
            minute.counters["deleted"] += 1
            continue
        minute.counters["acked"] += 1
        if claimed_at is not None and sent_at is not None:  # None: unreadable
            wait = max((claimed_at - sent_at).total_seconds(), 0.0)
            run = max((finished_at - claimed_at).total_seconds(), 0.0)
            minute.counters["wait_total"] += wait
            minute.counters["run_total"] += run
            minute.waits.append(wait)
            minute.runs.append(run)
    return counted


def _apply(db: str, minutes: dict[tuple[int, datetime], _Minute]) -> None:
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


def _count_published(db: str, cursor: StatsCursor, *, not_before: datetime) -> int:
    low, high = cursor.body_id, cursor.body_seen_id
    counted = 0
    if high > low:
        rows = (Body.objects.using(db)
                .filter(pk__gt=low, pk__lte=high, published_at__gte=not_before)
                .annotate(minute=TruncMinute("published_at", tzinfo=UTC))
                .values("topic_id", "minute").annotate(n=Count("pk")).order_by())
        params = []
        conn = connections[db]
        for row in rows:
            params.append([row["topic_id"], Period.MINUTE,
                           conn.ops.adapt_datetimefield_value(minute_of(row["minute"])), row["n"]])
            counted += row["n"]
        add_counters(db, TopicStat._meta.db_table, ["topic_id", "period", "start"],
                     ["topic_id", "period", "start", "published"], ["published"], params)
        cursor.body_id = high
    cursor.body_seen_id = max(high, Body.objects.using(db).aggregate(n=Max("pk"))["n"] or 0)
    return counted


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


def sample_depth(queue_ids: list[int] | None = None) -> int:
    """Snapshot every queue's (or the given queues') counts by state. Returns queues sampled.

    One grouped pass over the claim index (whose leading columns are queue and
    state, and which holds the id), one lookup of each queue's first ready
    message, and one range read of the claimed messages on the due index.
    """
    db = dialects.alias()
    now = timezone.now()
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
    for queue_id, sent_at in Message.objects.using(db).filter(pk__in=first_ready).values_list(
            "queue_id", "sent_at"):
        depths[queue_id].oldest_ready_at = sent_at
    for claimed in (messages.filter(state=State.CLAIMED).values("queue_id")
                    .annotate(oldest=Min("claimed_at")).order_by()):
        if claimed["queue_id"] in depths:
            depths[claimed["queue_id"]].oldest_claimed_at = claimed["oldest"]
    fields = ["ready", "scheduled", "in_flight", "waiting", "dead", "oldest_ready_at",
              "oldest_claimed_at", "sampled_at"]
    QueueDepth.objects.using(db).bulk_create(
        list(depths.values()), **vendor_sql.upsert_options(["queue"], fields))
    return len(depths)


def prune(db: str, now: datetime) -> int:
    removed = 0
    for period, keep in KEEP.items():
        for model in (QueueStat, TopicStat):
            removed += model.objects.using(db).filter(period=period, start__lt=now - keep).delete()[0]
    return removed
