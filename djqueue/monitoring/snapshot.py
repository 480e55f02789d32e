"""What the dashboard shows, read in a fixed number of indexed queries.

Nothing here counts the message table: depths come from the reaper's
snapshots (:class:`~djqueue.models.QueueDepth`), rates from the statistics
roll-ups, what each worker holds from its heartbeat, so the page costs the
same with ten messages or ten million.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from djqueue.models import (
    Alarm,
    Period,
    Queue,
    QueueStat,
    Subscription,
    TopicStat,
    Worker,
)
from djqueue.monitoring import rollups
from djqueue.storage import dialects

RECENT_ALARMS = 10
TOP_TOPICS = 10


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
    """A live worker; what it holds is what its last heartbeat reported."""

    worker: Worker
    heartbeat_age: float


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
    now = now or timezone.now()
    rows = {}
    for queue in Queue.objects.using(db).select_related("depth").order_by("name"):
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
        row = rows.get(queue_id)
        if row is None or not 0 <= slot < 60:
            continue
        row.sent_hour += sent
        row.finished_hour += acked + deleted
        row.failed_hour += failed
        row.per_minute[slot] += acked + deleted
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
        alarms=list(Alarm.objects.using(db).select_related("policy")[:RECENT_ALARMS]),
        per_minute=per_minute, per_hour=[round(n / 60) for n in per_hour])


def _group_lags(db: str, rows: dict[int, QueueSummary]) -> list[GroupLagSummary]:
    lags = []
    for sub in (Subscription.objects.using(db).select_related("group__topic", "queue")
                .order_by("group__topic__name", "group__name", "consumer")):
        row = rows.get(sub.queue_id)
        name = f"{sub.group.topic.name}:{sub.group.name}" + (
            f":{sub.consumer}" if sub.consumer else "")
        lags.append(GroupLagSummary(name, sub.group.get_mode_display(), sub.queue.name,
                             row.pending if row else 0))
    return lags


def _workers(db: str, now: datetime) -> list[WorkerSummary]:
    return [WorkerSummary(w, max((now - w.heartbeat_at).total_seconds(), 0.0))
            for w in Worker.objects.using(db).order_by("started_at")]


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
