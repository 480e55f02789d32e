"""What the dashboard shows, read in a fixed number of indexed queries.

Nothing here counts the message table's backlog: depths come from the
reaper's snapshots (:class:`~djqueue.models.QueueDepth`), rates from the
statistics roll-ups, what each worker holds from its heartbeat, so the page
costs the same with ten messages or ten million. The one count of message
rows, the busiest keys of queues with per-key limits, reads claimed rows
only (index djqueue_msg_claim), which the workers' capacity bounds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Q

from djqueue.models import (
    Alarm,
    Message,
    MessageGroup,
    Period,
    Queue,
    QueueLimiter,
    QueueStat,
    State,
    Subscription,
    TopicStat,
    Worker,
)
from djqueue.monitoring import rollups
from djqueue.storage import dialects, host_clock
from djqueue.storage.unreadable_rows import read_rows, without_times

RECENT_ALARMS = 10
TOP_TOPICS = 10
#: Keys shown per queue with per-key limits (the busiest, and those held back now).
TOP_KEYS = 5


@dataclass
class QueueSummary:
    queue: Queue
    ready: int = 0
    scheduled: int = 0
    in_flight: int = 0
    waiting: int = 0
    dead: int = 0
    oldest_age: float | None = None
    sampled_at: datetime | None = None
    sent_hour: int = 0
    finished_hour: int = 0
    failed_hour: int = 0
    per_minute: list[int] = field(default_factory=lambda: [0] * 60)

    @property
    def pending(self) -> int:
        return self.ready + self.scheduled + self.in_flight + self.waiting


@dataclass(frozen=True)
class GroupLagSummary:
    name: str
    mode: str
    queue: str
    pending: int


@dataclass(frozen=True)
class WorkerSummary:
    """A live worker; what it holds is what its last heartbeat reported. No age when a
    hand edit left its heartbeat unreadable."""

    worker: Worker
    heartbeat_age: float | None


@dataclass
class LimitSummary:
    """A limited queue: its limits, their use now, and how long they held messages back."""

    queue: Queue
    in_flight: int = 0
    tokens: float | None = None
    throttled_for: float | None = None
    throttled_seconds: float = 0.0
    held_back: int = 0
    #: (key, messages of it in flight), the busiest first.
    busiest_keys: list[tuple[str, int]] = field(default_factory=list)
    #: (key, seconds until its next token), for keys its rate holds back now.
    throttled_keys: list[tuple[str, float]] = field(default_factory=list)

    @property
    def limits(self) -> list[str]:
        q = self.queue
        text = []
        if q.rate_limit:
            text.append(f"{q.rate_limit} (burst {q.burst()})")
        if q.concurrency_limit is not None:
            text.append(f"{q.concurrency_limit} at once")
        if q.group_concurrency:
            text.append(f"{q.group_concurrency} at once a key")
        if q.group_rate_limit:
            text.append(f"{q.group_rate_limit} a key (burst {q.group_burst()})")
        return text


@dataclass(frozen=True)
class TopicSummary:
    name: str
    last_hour: int
    last_day: int


@dataclass
class DashboardSnapshot:
    now: datetime
    queues: list[QueueSummary]
    groups: list[GroupLagSummary]
    workers: list[WorkerSummary]
    topics: list[TopicSummary]
    alarms: list[Alarm]
    per_minute: list[int]
    per_hour: list[int]
    limits: list[LimitSummary] = field(default_factory=list)

    @property
    def sampled_at(self) -> datetime | None:
        return min((q.sampled_at for q in self.queues if q.sampled_at), default=None)

    @property
    def totals(self) -> dict[str, int]:
        names = ["ready", "scheduled", "in_flight", "waiting", "dead", "finished_hour",
                 "failed_hour", "sent_hour"]
        return {name: sum(getattr(q, name) for q in self.queues) for name in names}


def load(now: datetime | None = None) -> DashboardSnapshot:
    db = dialects.alias()
    now = now or host_clock.database_now(db)
    rows = {}
    for queue in rollups.with_depths(Queue.objects.using(db)).order_by("name"):
        row = rows[queue.pk] = QueueSummary(queue)
        depth = getattr(queue, "depth", None)
        if depth is not None:
            row.ready, row.scheduled, row.in_flight = depth.ready, depth.scheduled, depth.in_flight
            row.waiting, row.dead, row.sampled_at = depth.waiting, depth.dead, depth.sampled_at
            if depth.oldest_ready_at is not None:
                row.oldest_age = max((now - depth.oldest_ready_at).total_seconds(), 0.0)
    this_minute = rollups.minute_of(now)
    per_minute = [0] * 60
    for queue_id, start, sent, acked, deleted, failed in (
            QueueStat.objects.using(db)
            .filter(period=Period.MINUTE, start__gt=this_minute - timedelta(minutes=60))
            .values_list("queue_id", "start", "sent", "acked", "deleted", "failed")):
        slot = 59 - int((this_minute - rollups.minute_of(start)).total_seconds() // 60)
        summary = rows.get(queue_id)
        if summary is None or not 0 <= slot < 60:
            continue
        summary.sent_hour += sent
        summary.finished_hour += acked + deleted
        summary.failed_hour += failed
        summary.per_minute[slot] += acked + deleted
        per_minute[slot] += acked + deleted
    this_hour = rollups.hour_of(now)
    per_hour = [0] * 24
    for start, acked, deleted in (
            QueueStat.objects.using(db)
            .filter(period=Period.HOUR, start__gt=this_hour - timedelta(hours=24))
            .values_list("start", "acked", "deleted")):
        slot = 23 - int((this_hour - rollups.hour_of(start)).total_seconds() // 3600)
        if 0 <= slot < 24:
            per_hour[slot] += acked + deleted
    return DashboardSnapshot(
        now=now, queues=list(rows.values()), groups=_group_lags(db, rows),
        workers=_workers(db, now), topics=_topics(db, now),
        # Policies by a second query: joined, MariaDB sorts every alarm to find the last.
        alarms=list(Alarm.objects.using(db).prefetch_related("policy")[:RECENT_ALARMS]),
        per_minute=per_minute, per_hour=[round(n / 60) for n in per_hour],
        limits=_limits(db, rows, now))


def _limits(db: str, rows: dict[int, QueueSummary], now: datetime) -> list[LimitSummary]:
    limited = {pk: LimitSummary(row.queue, in_flight=row.in_flight)
               for pk, row in rows.items()
               if row.queue.limits_claims or row.queue.group_concurrency}
    if not limited:
        return []
    for limiter in QueueLimiter.objects.using(db).filter(queue_id__in=list(limited)):
        summary = limited[limiter.queue_id]
        summary.held_back, summary.throttled_seconds = limiter.held_back, limiter.throttled_seconds
        if limiter.throttled_since is not None:
            summary.throttled_for = max(now.timestamp() - limiter.throttled_since, 0.0)
        rate = summary.queue.rate()
        if rate is not None:
            summary.tokens = min(float(summary.queue.burst()), limiter.tokens + max(
                0.0, now.timestamp() - limiter.refilled_at) * rate.per_second)
    keyed = [pk for pk, s in limited.items() if s.queue.group_concurrency or s.queue.group_rate_limit]
    if keyed:
        for queue_id, key, count in (
                Message.objects.using(db).filter(queue_id__in=keyed, state=State.CLAIMED,
                                                 group_key__isnull=False)
                .values("queue_id", "group_key").annotate(n=Count("id"))
                .order_by("-n", "group_key").values_list("queue_id", "group_key", "n")):
            busiest = limited[queue_id].busiest_keys
            if key is not None and len(busiest) < TOP_KEYS:  # (never None: the filter's)
                busiest.append((key, count))
        for queue_id, key, until in (
                MessageGroup.objects.using(db)
                .filter(queue_id__in=keyed, throttled_until__gt=now.timestamp())
                .order_by("-throttled_until")
                .values_list("queue_id", "key", "throttled_until")[:TOP_KEYS * len(keyed)]):
            held = limited[queue_id].throttled_keys
            if until is not None and len(held) < TOP_KEYS:  # (never None: the filter's)
                held.append((key, until - now.timestamp()))
    return list(limited.values())


def _group_lags(db: str, rows: dict[int, QueueSummary]) -> list[GroupLagSummary]:
    lags = []
    for sub in without_times(Subscription.objects.using(db).select_related(
            "group__topic", "queue").order_by("group__topic__name", "group__name", "consumer")):
        row = rows.get(sub.queue_id)
        name = f"{sub.group.topic.name}:{sub.group.name}" + (
            f":{sub.consumer}" if sub.consumer else "")
        lags.append(GroupLagSummary(name, sub.group.get_mode_display(), sub.queue.name,
                             row.pending if row else 0))
    return lags


def _workers(db: str, now: datetime) -> list[WorkerSummary]:
    return [WorkerSummary(w, None if w.heartbeat_at is None  # a hand edit left it unreadable
                          else max((now - w.heartbeat_at).total_seconds(), 0.0))
            for w in read_rows(Worker.objects.using(db).order_by("started_at"))]


def _topics(db: str, now: datetime) -> list[TopicSummary]:
    hour_start = rollups.minute_of(now) - timedelta(minutes=60)
    volumes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, period, published in (
            TopicStat.objects.using(db)
            .filter(Q(period=Period.MINUTE, start__gt=hour_start)
                    | Q(period=Period.HOUR, start__gt=rollups.hour_of(now) - timedelta(hours=24)))
            .values_list("topic__name", "period", "published")):
        if period == Period.HOUR:
            volumes[name][1] += published
        else:
            volumes[name][0] += published
    ranked = sorted(volumes.items(), key=lambda item: (-item[1][1], -item[1][0], item[0]))
    return [TopicSummary(name, hour, day) for name, (hour, day) in ranked[:TOP_TOPICS]]
