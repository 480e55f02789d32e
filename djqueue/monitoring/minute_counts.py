"""What happened since the statistics' last pass, counted by queue (or topic) and
minute, for djqueue.monitoring.rollups to add to its rows: sends by message-id ranges
(one statement over pending and finished messages, so a message moving between them
mid-count is seen once), finishes with their wait and run times from history by
``finished_at`` windows, publications by body-id ranges.

A hand edit or another tool can leave a time no driver reads back in one of these rows.
Read in one statement with the others, it failed every pass, and the statistics stood
still for good. A send or publication stamped more than a day from the pass is left
out (only such an edit writes one), and a finished message whose times cannot be read is
counted without its wait and run (djqueue.storage.unreadable_rows).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connections, models
from django.db.models import Count, F, Max
from django.db.models.functions import Coalesce, TruncMinute

from djqueue.models import Body, History, Message, Outcome, Period, Queue, StatsCursor, TopicStat
from djqueue.storage.statements.stat_counters import add_counters, minute_of
from djqueue.storage.unreadable_rows import UNREADABLE, read_values


@dataclass
class Minute:
    """What happened in one minute of one queue: counters, and the waits and runs of
    the messages finished in it (for its histograms)."""

    counters: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    waits: list[float] = field(default_factory=list)
    runs: list[float] = field(default_factory=list)


def count_sends(db: str, cursor: StatsCursor, minutes: dict, *, not_before: datetime,
                not_after: datetime) -> int:
    """The sends among the ids new since the last pass, by minute; only those sent
    between ``not_before`` and ``not_after``."""
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


def count_finished(db: str, since: datetime, until: datetime, minutes: dict) -> int:
    """The messages finished in [``since``, ``until``), by minute, with their waits and
    runs; streamed from one statement, or read again in chunks if a row fails it."""
    queue_ids = list(Queue.objects.using(db).values_list("pk", flat=True))
    finished = History.objects.using(db).filter(
        queue_id__in=queue_ids, finished_at__gte=since, finished_at__lt=until)
    columns = ("queue_id", "outcome", "sent_at", "claimed_at", "finished_at")
    counts: dict[tuple[int, datetime], Minute] = defaultdict(Minute)
    try:
        counted = _count_rows(finished.values_list(*columns).iterator(chunk_size=5000), counts)
    except UNREADABLE:  # a hand edit left a time no driver reads back: count it without
        counts = defaultdict(Minute)
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


def count_published(db: str, cursor: StatsCursor, *, not_before: datetime,
                    not_after: datetime) -> int:
    """The publications among the bodies new since the last pass, by minute; not those
    after ``not_after``, as :func:`count_sends`."""
    low, high = cursor.body_id, cursor.body_seen_id
    counted = 0
    if high > low:
        rows = (Body.objects.using(db)
                .filter(pk__gt=low, pk__lte=high, published_at__gte=not_before,
                        published_at__lt=not_after)
                .annotate(minute=TruncMinute("published_at", tzinfo=UTC))
                .values("topic_id", "minute").annotate(n=Count("pk")).order_by())
        params = []
        conn = connections[db]
        for row in rows:
            if row["minute"] is None:  # SQLite's truncation of text that is no time
                continue
            params.append([row["topic_id"], Period.MINUTE,
                           conn.ops.adapt_datetimefield_value(minute_of(row["minute"])), row["n"]])
            counted += row["n"]
        add_counters(db, TopicStat._meta.db_table, ["topic_id", "period", "start"],
                     ["topic_id", "period", "start", "published"], ["published"], params)
        cursor.body_id = high
    cursor.body_seen_id = max(high, Body.objects.using(db).aggregate(n=Max("pk"))["n"] or 0)
    return counted
