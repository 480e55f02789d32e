"""Alarm policies and the alarms they fired."""

from __future__ import annotations

import math

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from djqueue import durations

#: The largest threshold a policy may have (a depth, an age in seconds, a lag).
MAX_THRESHOLD = 1e15


class Metric(models.TextChoices):
    DEPTH = "depth", "pending messages"
    OLDEST_AGE = "oldest_age", "age of the oldest ready message (s)"
    DEAD_LETTERS = "dead_letters", "dead-lettered messages"
    GROUP_LAG = "group_lag", "consumer-group lag (pending deliveries)"
    IN_FLIGHT_AGE = "in_flight_age", "longest time a message has been in flight (s)"
    THROTTLED = "throttled", "time a queue's limit has held ready messages back (s)"


class AlarmPolicy(models.Model):
    """Fire when ``metric`` exceeds ``threshold``: once per breach, and not again
    within ``cooldown`` seconds of the last firing (EMQ alarms)."""

    name = models.CharField(max_length=100, unique=True)
    metric = models.CharField(max_length=20, choices=Metric.choices)
    queue = models.ForeignKey(
        "djqueue.Queue", null=True, blank=True, on_delete=models.CASCADE, related_name="+",
        help_text="Empty: every queue (the worst one counts).")
    consumer_group = models.ForeignKey(
        "djqueue.ConsumerGroup", null=True, blank=True, on_delete=models.CASCADE,
        related_name="+", help_text="For group lag: the group (empty: every group).")
    threshold = models.FloatField()
    cooldown = models.FloatField(default=900.0, help_text="Seconds between two firings at least.")
    enabled = models.BooleanField(default=True)
    firing = models.BooleanField(default=False, editable=False,
                                 help_text="The current breach has been alerted.")
    last_fired_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name_plural = "alarm policies"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.threshold is not None and not (
                math.isfinite(self.threshold) and 0 <= self.threshold <= MAX_THRESHOLD):
            raise ValidationError(
                {"threshold": f"Must be a number from 0 to {MAX_THRESHOLD:g}."})
        if self.cooldown is not None:
            try:
                durations.check(self.cooldown, "cooldown", high=durations.MAX_RETENTION,
                                positive=False)
            except ValueError as exc:
                raise ValidationError({"cooldown": str(exc)}) from None
        if self.consumer_group_id is not None and self.metric != Metric.GROUP_LAG:
            raise ValidationError({"consumer_group": "Only group-lag policies name a group."})


class Alarm(models.Model):
    """One firing of a policy."""

    policy = models.ForeignKey(AlarmPolicy, on_delete=models.CASCADE, related_name="alarms")
    subject = models.CharField(max_length=200, help_text="The queue or group that breached.")
    value = models.FloatField()
    threshold = models.FloatField()
    fired_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-fired_at"]

    def __str__(self) -> str:
        return f"{self.policy.name}: {self.subject} {self.value:g} > {self.threshold:g}"
