"""Statistics: roll-ups per queue and period, depth snapshots, and the roll-up's cursors.

The dashboard and the alarms read only these small tables, never the message
table: their size grows with queues times time buckets, not with messages.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import models
from django.utils import timezone

from djqueue import histograms
from djqueue.models.shown_times import shown_time


class Period(models.TextChoices):
    MINUTE = "m", "minute"
    HOUR = "h", "hour"
    DAY = "d", "day"
    #: One row per queue, counting since the queue's first message: the monotonic
    #: totals that Prometheus counters need (never pruned, never recomputed).
    TOTAL = "t", "all time"


#: The ``start`` of every TOTAL row.
TOTAL_START = datetime(2000, 1, 1, tzinfo=UTC)


class QueueStat(models.Model):
    """What happened in one queue during one minute, hour or day (EMQ's daily statistics).

    Sends are counted by the queue a message was sent to; a failure and a
    dead-lettering by the queue the message failed in. Wait (sent → claimed)
    and run (claimed → finished) are over acked messages, kept as histograms so
    that hours and days are exact merges of their minutes.
    """

    # No index of its own: djqueue_stat_unique begins with it (migration 0018).
    queue = models.ForeignKey("djqueue.Queue", on_delete=models.CASCADE, related_name="+",
                              db_index=False)
    period = models.CharField(max_length=1, choices=Period.choices)
    start = models.DateTimeField()
    sent = models.PositiveBigIntegerField(default=0)
    acked = models.PositiveBigIntegerField(default=0)
    deleted = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveBigIntegerField(default=0)
    dead_lettered = models.PositiveBigIntegerField(default=0)
    wait_total = models.FloatField(default=0.0, help_text="Seconds, summed over timed messages.")
    run_total = models.FloatField(default=0.0, help_text="Seconds, summed over timed messages.")
    wait_hist = models.JSONField(default=dict)
    run_hist = models.JSONField(default=dict)

    class Meta:
        verbose_name = "queue statistic"
        constraints = [models.UniqueConstraint(fields=["queue", "period", "start"],
                                               name="djqueue_stat_unique")]
        indexes = [models.Index(fields=["period", "start"], name="djqueue_stat_period")]

    def __str__(self) -> str:
        return f"{self.queue_id} {self.get_period_display()} {shown_time(self.start)}"

    @property
    def timed(self) -> int:
        return histograms.total(self.wait_hist)

    @property
    def wait_mean(self) -> float | None:
        return self.wait_total / self.timed if self.timed else None

    @property
    def run_mean(self) -> float | None:
        return self.run_total / self.timed if self.timed else None

    @property
    def wait_p95(self) -> float | None:
        return histograms.quantile(self.wait_hist, 0.95)

    @property
    def run_p95(self) -> float | None:
        return histograms.quantile(self.run_hist, 0.95)


class TopicStat(models.Model):
    """Bodies published to a topic in one minute, hour or day (the topic volume ranking)."""

    # No index of its own: djqueue_topicstat_unique begins with it (migration 0018).
    topic = models.ForeignKey("djqueue.Topic", on_delete=models.CASCADE, related_name="+",
                              db_index=False)
    period = models.CharField(max_length=1, choices=Period.choices)
    start = models.DateTimeField()
    published = models.PositiveBigIntegerField(default=0)

    class Meta:
        verbose_name = "topic statistic"
        constraints = [models.UniqueConstraint(fields=["topic", "period", "start"],
                                               name="djqueue_topicstat_unique")]
        indexes = [models.Index(fields=["period", "start"], name="djqueue_topicstat_period")]

    def __str__(self) -> str:
        return f"{self.topic_id} {self.get_period_display()} {shown_time(self.start)}"


class QueueDepth(models.Model):
    """A queue's message counts by state, sampled by the reaper (one indexed pass)."""

    queue = models.OneToOneField("djqueue.Queue", on_delete=models.CASCADE, primary_key=True,
                                 related_name="depth")
    ready = models.PositiveBigIntegerField(default=0)
    scheduled = models.PositiveBigIntegerField(default=0)
    in_flight = models.PositiveBigIntegerField(default=0)
    waiting = models.PositiveBigIntegerField(default=0)
    dead = models.PositiveBigIntegerField(default=0)
    oldest_ready_at = models.DateTimeField(null=True, blank=True)
    oldest_claimed_at = models.DateTimeField(null=True, blank=True)
    sampled_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "queue depth"

    def __str__(self) -> str:
        return f"{self.queue_id}: {self.pending} pending"

    @property
    def pending(self) -> int:
        return self.ready + self.scheduled + self.in_flight + self.waiting


class StatsCursor(models.Model):
    """How far the roll-up has counted. Sends and publications are counted by id
    ranges (``*_id`` is the last id counted), finished messages by time
    (``until``). ``*_seen_id`` is the newest id seen one pass earlier: a pass
    counts only up to it, so a send that committed late (its id taken before a
    newer one committed) is still inside the next range."""

    name = models.CharField(max_length=20, primary_key=True)
    message_id = models.BigIntegerField(default=0)
    message_seen_id = models.BigIntegerField(default=0)
    body_id = models.BigIntegerField(default=0)
    body_seen_id = models.BigIntegerField(default=0)
    until = models.DateTimeField()

    def __str__(self) -> str:
        return self.name
