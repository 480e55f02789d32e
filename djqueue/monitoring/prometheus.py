"""Prometheus metrics: what djqueue's own tables know, in the exposition format.

Everything is read from the small tables the reaper keeps: depths from its
snapshots (:class:`~djqueue.models.QueueDepth`), totals and duration
histograms from the all-time statistics rows (``Period.TOTAL``), workers from
their heartbeat rows, limits from the limiter rows. A scrape costs the same
six indexed queries with ten messages or ten million (``QUERIES``); it never
counts the message table. The figures are as fresh as the reaper's last pass
(``djqueue_depth_sampled_timestamp_seconds`` says when that was).

With queues on several databases (djqueue.storage.placement) each family holds
the series of all of them: a queue's name is one queue wherever it lives, and a
worker serving several databases is one worker.

Used by :func:`djqueue.monitoring.views.metrics` (a view to mount) and by
``manage.py djqueue_metrics`` (a port of its own). ``prometheus_client`` is
imported here alone, when metrics are first asked for.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from djqueue import histograms
from djqueue.models import Period, Queue, QueueLimiter, QueueStat, StatsCursor, Worker
from djqueue.monitoring import rollups
from djqueue.storage import placement
from djqueue.storage.unreadable_rows import read_rows

#: The queries one collection runs on each database, whatever the backlog (a test holds
#: it to this).
QUERIES = 5
#: Bucket bounds (seconds) of the wait and run histograms. djqueue keeps finer
#: buckets (10 % apart); each is counted under the first bound at or above its
#: upper edge, so a bucket's count is never short, and at most 10 % early.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
           300.0, 900.0, 3600.0)
STATES = (("ready", "ready"), ("delayed", "scheduled"), ("in_flight", "in_flight"),
          ("waiting", "waiting"), ("dead", "dead"))
STATE_FIELDS = [field for _, field in STATES]


class DjqueueCollector:
    """A prometheus_client collector reading djqueue's tables at each scrape."""

    def describe(self) -> list:
        return []  # no metric is described up front: registering must not touch the database

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        now = timezone.now()
        # Each database's rows from its read replica, when there is one.
        read = {db: placement.read_database(db) for db in placement.databases()}
        by_database = {db: list(rollups.with_depths(Queue.objects.using(read[db]))
                                .order_by("name")) for db in read}
        yield from _depths([q for found in by_database.values() for q in found], now,
                           GaugeMetricFamily)
        replicas = {db: replica for db, replica in read.items() if replica != db}
        # From here, keyed by the database each list was read from.
        by_database = {read[db]: found for db, found in by_database.items()}
        yield from _totals(by_database, CounterMetricFamily, HistogramMetricFamily)
        yield from _workers(list(by_database), now, GaugeMetricFamily)
        yield from _limits(by_database, now, GaugeMetricFamily, CounterMetricFamily)
        if replicas:
            yield _replica_lags(replicas, GaugeMetricFamily)
        yield from _stats_counted_until(list(by_database), GaugeMetricFamily)


def _depths(queues: list[Queue], now: datetime, gauge: Any) -> Iterator[Any]:
    """The queues' depths by state, their oldest ready ages and paused flags, as the
    reaper last sampled them. A partitioned queue has a row on each partition (and its
    directory row): one series each, its rows' counts summed."""
    messages = gauge("djqueue_queue_messages",
                     "Messages in the queue by state, at the reaper's last sample.",
                     labels=["queue", "state"])
    oldest = gauge("djqueue_queue_oldest_ready_age_seconds",
                   "Age of the oldest ready message.", labels=["queue"])
    paused = gauge("djqueue_queue_paused", "1 if the queue is paused.", labels=["queue"])
    sampled = gauge("djqueue_depth_sampled_timestamp_seconds",
                    "When the reaper last sampled the queues' depths.")
    latest = 0.0
    is_paused: dict[str, bool] = {}
    counts: dict[str, dict[str, float]] = {}
    ages: dict[str, float] = {}
    for queue in queues:
        is_paused[queue.name] = is_paused.get(queue.name, False) or queue.paused
        depth = getattr(queue, "depth", None)
        if depth is None:
            continue
        found = counts.setdefault(queue.name, dict.fromkeys(STATE_FIELDS, 0.0))
        for field in STATE_FIELDS:
            found[field] += float(getattr(depth, field))
        age = ((now - depth.oldest_ready_at).total_seconds()
               if depth.oldest_ready_at is not None else 0.0)
        ages[queue.name] = max(ages.get(queue.name, 0.0), age)
        latest = max(latest, depth.sampled_at.timestamp())
    for name, is_it in is_paused.items():
        paused.add_metric([name], 1.0 if is_it else 0.0)
    for name, found in counts.items():
        for label, field in STATES:
            messages.add_metric([name, label], found[field])
        oldest.add_metric([name], ages[name])
    if latest:
        sampled.add_metric([], latest)
    yield from (messages, oldest, paused, sampled)


def _replica_lags(replicas: dict[str, str], gauge: Any) -> Any:
    """How far each read replica is behind its primary (no series while it is not
    replicating, or does not answer)."""
    lag = gauge("djqueue_read_database_lag_seconds",
                "How far the read replica the metrics come from is behind its primary "
                "(absent while it is not replicating).", labels=["database", "replica"])
    for db, replica in replicas.items():
        try:
            behind = placement.replica_lag(replica)
        except DatabaseError:
            behind = None
        if behind is not None:
            lag.add_metric([db, replica], behind)
    return lag


def _stats_counted_until(databases: list[str], gauge: Any) -> Iterator[Any]:
    """How far the reaper's statistics have counted: the database counted least far
    says it (nothing before the first count)."""
    counted = min((until for db in databases for until in StatsCursor.objects.using(
        db).filter(name="stats").values_list("until", flat=True)), default=None)
    if counted is not None:
        until = gauge("djqueue_stats_counted_until_timestamp_seconds",
                      "How far the reaper's statistics have counted.")
        until.add_metric([], counted.timestamp())
        yield until


def _totals(by_database: dict[str, list[Queue]], counter: Any,
            histogram: Any) -> Iterator[Any]:
    sent = counter("djqueue_messages_sent", "Messages sent to the queue.", labels=["queue"])
    finished = counter("djqueue_messages_finished",
                       "Messages that left the queue for good: acked, or deleted.",
                       labels=["queue", "outcome"])
    failed = counter("djqueue_messages_failed", "Deliveries that failed.", labels=["queue"])
    retried = counter("djqueue_messages_retried", "Failed deliveries that were retried.",
                      labels=["queue"])
    dead = counter("djqueue_messages_dead_lettered", "Messages dead-lettered.",
                   labels=["queue"])
    wait = histogram("djqueue_message_wait_seconds",
                     "Time from send to claim, of acked messages.", labels=["queue"])
    run = histogram("djqueue_message_run_seconds",
                    "Time from claim to ack, of acked messages.", labels=["queue"])
    rows = [(row, {q.pk: q.name for q in queues}.get(row.queue_id))
            for db, queues in by_database.items()
            for row in QueueStat.objects.using(db).filter(period=Period.TOTAL).order_by("queue_id")]
    summed: dict[str, QueueStat] = {}  # a partitioned queue's partitions, added up
    for row, name in rows:
        if name is None:
            continue
        total = summed.get(name)
        if total is None:
            summed[name] = row
            continue
        for field in ("sent", "acked", "deleted", "failed", "dead_lettered", "wait_total",
                      "run_total"):
            setattr(total, field, getattr(total, field) + getattr(row, field))
        total.wait_hist = histograms.merge(total.wait_hist, row.wait_hist)
        total.run_hist = histograms.merge(total.run_hist, row.run_hist)
    for name, row in summed.items():
        sent.add_metric([name], row.sent)
        finished.add_metric([name, "acked"], row.acked)
        finished.add_metric([name, "deleted"], row.deleted)
        failed.add_metric([name], row.failed)
        retried.add_metric([name], max(row.failed - row.dead_lettered, 0))
        dead.add_metric([name], row.dead_lettered)
        for family, hist, total_seconds in ((wait, row.wait_hist, row.wait_total),
                                            (run, row.run_hist, row.run_total)):
            family.add_metric([name], _buckets(hist), sum_value=total_seconds)
    yield from (sent, finished, failed, retried, dead, wait, run)


def _buckets(hist: dict[str, int]) -> list[tuple[str, float]]:
    """djqueue's fine histogram as cumulative Prometheus buckets."""
    counts = [0] * (len(BUCKETS) + 1)
    for key, count in hist.items():
        edge = histograms.upper_bound(int(key))
        slot = next((i for i, bound in enumerate(BUCKETS) if edge <= bound * (1 + 1e-9)),
                    len(BUCKETS))
        counts[slot] += count
    cumulative, buckets = 0, []
    for bound, count in zip((*BUCKETS, math.inf), counts, strict=True):
        cumulative += count
        buckets.append(("+Inf" if bound == math.inf else f"{bound:g}", float(cumulative)))
    return buckets


def _workers(databases: list[str], now: datetime, gauge: Any) -> Iterator[Any]:
    up = gauge("djqueue_worker_up", "1 for each registered process; kind is worker, http "
               "(an HTTP API server), receive (a process whose receive() waits) or "
               "reaper.",
               labels=["worker", "host", "kind"])
    held = gauge("djqueue_worker_messages_held", "Messages the worker held at its last beat.",
                 labels=["worker"])
    age = gauge("djqueue_worker_heartbeat_age_seconds", "Seconds since the worker's last beat.",
                labels=["worker"])
    threads = gauge("djqueue_worker_concurrency", "The worker's handler threads.",
                    labels=["worker"])
    clock = gauge("djqueue_worker_clock_offset_seconds", "Seconds the process's host clock "
                  "was ahead of the database server's (behind: below zero) at its latest "
                  "comparison; none on SQLite.", labels=["worker", "database"])
    seen: set[str] = set()
    for database, worker in ((db, w) for db in databases for w in read_rows(
            Worker.objects.using(db).order_by("started_at"))):
        if worker.clock_offset is not None:  # one a database: its server's clock
            clock.add_metric([worker.id, database], worker.clock_offset)
        if worker.id in seen:  # present on each database it serves
            continue
        seen.add(worker.id)
        up.add_metric([worker.id, worker.hostname, worker.kind], 1.0)
        held.add_metric([worker.id], float(worker.holding))
        if worker.heartbeat_at is not None:  # None: a hand edit left it unreadable
            age.add_metric([worker.id], max((now - worker.heartbeat_at).total_seconds(), 0.0))
        threads.add_metric([worker.id], float(worker.concurrency))
    yield from (up, held, age, threads, clock)


def _limits(by_database: dict[str, list[Queue]], now: datetime, gauge: Any,
            counter: Any) -> Iterator[Any]:
    limited = {(db, q.pk): q for db, queues in by_database.items() for q in queues
               if q.limits_claims}
    if not limited:
        return
    concurrency = gauge("djqueue_queue_concurrency_limit",
                        "The queue's concurrency limit (messages claimed at once).",
                        labels=["queue"])
    rate = gauge("djqueue_queue_rate_limit_per_second", "The queue's rate limit.",
                 labels=["queue"])
    tokens = gauge("djqueue_queue_rate_tokens", "Starts the queue's rate allows now.",
                   labels=["queue"])
    throttled = gauge("djqueue_queue_throttled",
                      "1 while the queue's limits hold ready messages back.", labels=["queue"])
    held_back = counter("djqueue_queue_throttled_seconds",
                        "Seconds the queue's limits have held ready messages back.",
                        labels=["queue"])
    limiters = [(db, limiter) for db in by_database
                for limiter in QueueLimiter.objects.using(db).filter(
                    queue_id__in=[pk for (where, pk) in limited if where == db])]
    shown: set[str] = set()  # a partitioned queue's limits: its first partition's
    for db, limiter in limiters:
        queue = limited[db, limiter.queue_id]
        if queue.name in shown:
            continue
        shown.add(queue.name)
        if queue.concurrency_limit is not None:
            concurrency.add_metric([queue.name], float(queue.concurrency_limit))
        per_second = queue.rate()
        if per_second is not None:
            rate.add_metric([queue.name], per_second.per_second)
            refilled = limiter.tokens + max(0.0, now.timestamp() - limiter.refilled_at) * (
                per_second.per_second)
            tokens.add_metric([queue.name], min(float(queue.burst()), refilled))
        spell = (max(now.timestamp() - limiter.throttled_since, 0.0)
                 if limiter.throttled_since is not None else 0.0)
        throttled.add_metric([queue.name], 1.0 if limiter.throttled_since is not None else 0.0)
        held_back.add_metric([queue.name], limiter.throttled_seconds + spell)
    yield from (concurrency, rate, tokens, throttled, held_back)
