"""Alarm policies, evaluated by the reaper against the depth snapshots.

A policy fires when its metric exceeds the threshold and it is not already
firing for the current breach, and at least ``cooldown`` seconds have passed
since it last fired. It stops firing when the metric is back under the
threshold. So one breach alerts once; a flapping metric at most once per
cool-down; a breach that began inside the cool-down alerts when it ends.
Firing logs a warning, sends :data:`djqueue.signals.alarm_fired` and mails
``ADMINS`` — after the transaction that recorded it has committed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.mail import mail_admins
from django.db import transaction

from djqueue import signals
from djqueue.models import Alarm, AlarmPolicy, Metric, QueueDepth, QueueLimiter, Subscription
from djqueue.storage import dialects, host_clock
from djqueue.storage.claim_engines import engine_for
from djqueue.storage.unreadable_rows import read_rows, without_times

logger = logging.getLogger("djqueue.alarms")


@dataclass(frozen=True)
class Reading:
    subject: str
    value: float


def evaluate(now: datetime | None = None) -> list[Alarm]:
    """Check every enabled policy once; returns the alarms fired."""
    db = dialects.alias()
    now = now or host_clock.database_now(db)
    # Not the queues' creation times, which no metric reads: one a hand edit left
    # unreadable failed every policy at every pass.
    depths = list(QueueDepth.objects.using(db).select_related("queue")
                  .defer("queue__created_at"))
    fired: list[Alarm] = []
    with transaction.atomic(using=db):
        policies = AlarmPolicy.objects.using(db).filter(enabled=True).order_by("pk")
        # A last firing a hand edit left unreadable reads as none (and the next firing
        # writes it); raised, it stopped every policy.
        for policy in read_rows(engine_for().skipping_locked(policies)):
            reading = worst_reading(policy, depths, now)
            alarm = _step(policy, reading, now)
            if alarm is not None:
                fired.append(alarm)
        transaction.on_commit(lambda: _announce(fired), using=db)
    return fired


def _step(policy: AlarmPolicy, reading: Reading | None, now: datetime) -> Alarm | None:
    db = dialects.alias()
    if reading is None or reading.value <= policy.threshold:
        if policy.firing:
            policy.firing = False
            policy.save(using=db, update_fields=["firing"])
        return None
    cooled = (policy.last_fired_at is None
              or now - policy.last_fired_at >= timedelta(seconds=policy.cooldown))
    if policy.firing or not cooled:
        return None
    policy.firing, policy.last_fired_at = True, now
    policy.save(using=db, update_fields=["firing", "last_fired_at"])
    return Alarm.objects.using(db).create(policy=policy, subject=reading.subject,
                                          value=reading.value, threshold=policy.threshold,
                                          fired_at=now)


def worst_reading(policy: AlarmPolicy, depths: list[QueueDepth], now: datetime) -> Reading | None:
    """The policy's metric for its queue or group, or the worst over all of them."""
    if policy.metric == Metric.GROUP_LAG:
        return _worst_lag(policy, depths)
    if policy.metric == Metric.THROTTLED:
        return _worst_throttle(policy, depths, now)
    readings = [Reading(d.queue.name, _measure(policy.metric, d, now)) for d in depths
                if policy.queue_id is None or d.queue_id == policy.queue_id]
    return max(readings, key=lambda r: r.value, default=None)


def _measure(metric: str, depth: QueueDepth, now: datetime) -> float:
    if metric == Metric.DEPTH:
        return float(depth.pending)
    if metric == Metric.DEAD_LETTERS:
        return float(depth.dead)
    since = depth.oldest_ready_at if metric == Metric.OLDEST_AGE else depth.oldest_claimed_at
    return max((now - since).total_seconds(), 0.0) if since is not None else 0.0


def _worst_throttle(policy: AlarmPolicy, depths: list[QueueDepth],
                    now: datetime) -> Reading | None:
    """How long each limited queue's limit has held messages back, while it still has
    ready ones (a spell that ended with the backlog, workers gone, is not one)."""
    ready = {d.queue_id for d in depths if d.oldest_ready_at is not None}
    limiters = QueueLimiter.objects.using(dialects.alias()).filter(
        throttled_since__isnull=False).select_related("queue")
    if policy.queue_id is not None:
        limiters = limiters.filter(queue_id=policy.queue_id)
    readings = [Reading(limiter.queue.name, max(now.timestamp() - limiter.throttled_since, 0.0))
                for limiter in limiters
                if limiter.queue_id in ready and limiter.throttled_since is not None]
    return max(readings, key=lambda r: r.value, default=None)


def _worst_lag(policy: AlarmPolicy, depths: list[QueueDepth]) -> Reading | None:
    pending = {d.queue_id: d.pending for d in depths}
    subs = without_times(Subscription.objects.using(dialects.alias())
                         .select_related("group__topic"))
    if policy.consumer_group_id is not None:
        subs = subs.filter(group_id=policy.consumer_group_id)
    readings = [Reading(f"{s.group.topic.name}:{s.group.name}"
                        + (f":{s.consumer}" if s.consumer else ""),
                        float(pending.get(s.queue_id, 0))) for s in subs]
    return max(readings, key=lambda r: r.value, default=None)


def _announce(alarms: list[Alarm]) -> None:
    for alarm in alarms:
        policy = alarm.policy
        text = (f"djqueue alarm {policy.name!r}: {policy.get_metric_display()} of {alarm.subject} "
                f"is {alarm.value:g}, above {alarm.threshold:g}")
        logger.warning(text, extra={"alarm": policy.name, "subject": alarm.subject,
                                    "value": alarm.value})
        signals.alarm_fired.send(sender=AlarmPolicy, alarm=alarm)
        try:
            mail_admins(f"Alarm: {policy.name}", text)
        except Exception:
            logger.exception("Could not mail the alarm %r to ADMINS", policy.name)
