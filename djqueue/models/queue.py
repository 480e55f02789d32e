"""A queue is a row: its options govern leases, retries and limits."""

from __future__ import annotations

import re
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import models

from djqueue import durations
from djqueue.conf import get_settings

#: Steps a backoff schedule may have (the last one repeats).
MAX_BACKOFF_STEPS = 100
#: Deliveries a queue may allow before dead-lettering.
MAX_ATTEMPTS = 1000

QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")


def validate_queue_name(name: str) -> None:
    if not isinstance(name, str) or not QUEUE_NAME_RE.match(name):
        raise ValidationError(
            "%(name)r is not a valid queue name: use 1-100 letters, digits, '_', '.', ':' or '-'.",
            params={"name": name},
        )


def validate_backoff(value: object) -> None:
    if not isinstance(value, list) or not value:
        raise ValidationError("The backoff schedule must be a non-empty list of seconds.")
    if len(value) > MAX_BACKOFF_STEPS:
        raise ValidationError("The backoff schedule has at most %(n)d steps.",
                              params={"n": MAX_BACKOFF_STEPS})
    for step in value:
        try:
            durations.check(step, "A backoff step", high=durations.MAX_DELAY, positive=False)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None


def default_visibility_timeout() -> float:
    return get_settings().VISIBILITY_TIMEOUT


def default_max_attempts() -> int:
    return get_settings().MAX_ATTEMPTS


def default_backoff() -> list[float]:
    return list(get_settings().BACKOFF)


def default_retention() -> float:
    return get_settings().RETENTION


class Queue(models.Model):
    name = models.CharField(max_length=100, unique=True, validators=[validate_queue_name])
    visibility_timeout = models.FloatField(
        default=default_visibility_timeout,
        help_text="Seconds a received message stays leased to its receiver.")
    max_attempts = models.PositiveIntegerField(
        default=default_max_attempts,
        help_text="Deliveries before a failing message is dead-lettered.")
    backoff = models.JSONField(
        default=default_backoff, validators=[validate_backoff],
        help_text="Seconds to wait before retry n (list; the last step repeats).")
    dead_letter_queue = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="Where dead messages go; without one they stay in this queue, state dead.")
    retention = models.FloatField(
        default=default_retention, help_text="Seconds finished messages are kept in history.")
    paused = models.BooleanField(default=False, help_text="Paused queues are not claimed from.")
    max_depth = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most pending messages allowed; sends beyond it fail.")
    max_payload_bytes = models.PositiveIntegerField(
        null=True, blank=True, help_text="Largest encoded payload accepted.")
    ordered = models.BooleanField(
        default=False,
        help_text="Deliver the messages of one group key strictly in send order, one at a time.")
    skip_stale = models.BooleanField(
        default=False,
        help_text="Ordered queues: workers skip a delivery of a message that is not newer than "
                  "the last one acked in its group (a redelivery after an expired lease).")
    dedup_window = models.FloatField(
        null=True, blank=True,
        help_text="Seconds a dedup key stays taken after its send; empty: while the message "
                  "is pending.")
    trace = models.BooleanField(
        default=False, help_text="Keep an event log of every message's life (message trace).")
    exactly_once = models.BooleanField(
        default=False,
        help_text="Workers run the handler and the ack in one database transaction.")
    created_at = models.DateTimeField(auto_now_add=True)
    #: Exceptions a worker or the reaper met while serving this queue alone (an absurd
    #: value in its row, say): each is logged and counted, and the process goes on
    #: with the other queues. The dashboard shows them.
    errors_seen = models.PositiveIntegerField(
        default=0, editable=False,
        help_text="Errors a worker or the reaper met serving this queue alone.")
    last_error = models.TextField(blank=True, default="", editable=False)

    class Meta:
        ordering = ["name"]
        permissions = [
            ("pause_queue", "Can pause and resume queues"),
            ("purge_queue", "Can purge queues"),
            ("redrive_queue", "Can redrive dead-lettered messages"),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # (name, upper bound, whether 0 is refused): retention 0 keeps no history.
        checks = [("visibility_timeout", durations.MAX_LEASE, True),
                  ("retention", durations.MAX_RETENTION, False),
                  ("dedup_window", durations.MAX_RETENTION, True)]
        for name, high, positive in checks:
            value = getattr(self, name)
            if value is None and name != "retention":
                continue
            try:
                durations.check(value, name, high=high, positive=positive)
            except ValueError as exc:
                raise ValidationError({name: str(exc)}) from None
        if self.max_attempts is not None and not 1 <= self.max_attempts <= MAX_ATTEMPTS:
            raise ValidationError({"max_attempts": f"Must be 1 to {MAX_ATTEMPTS}."})
        if self.dead_letter_queue_id is not None and self.dead_letter_queue_id == self.pk:
            raise ValidationError(
                {"dead_letter_queue": "A queue cannot be its own dead-letter queue."})

    def retry_delay(self, attempt: int) -> timedelta:
        """Delay before the retry that follows failed delivery number ``attempt`` (1-based)."""
        steps = self.backoff if isinstance(self.backoff, list) and self.backoff else [0]
        step = steps[min(max(attempt, 1), len(steps)) - 1]
        return timedelta(seconds=durations.clamp(step, high=durations.MAX_DELAY, default=0.0))

    # The stored durations as they may be used: a row written past validation (an old
    # version's, or one edited by hand) is clamped here, so no worker or reaper pass
    # fails on it (see djqueue.durations).

    def lease_seconds(self) -> float:
        return durations.clamp(self.visibility_timeout, high=durations.MAX_LEASE,
                               default=get_settings().VISIBILITY_TIMEOUT)

    def retention_seconds(self) -> float:
        return durations.clamp(self.retention, high=durations.MAX_RETENTION,
                               default=get_settings().RETENTION)

    def dedup_seconds(self) -> float | None:
        if self.dedup_window is None:
            return None
        return durations.clamp(self.dedup_window, high=durations.MAX_RETENTION,
                               default=get_settings().RETENTION)


class Dashboard(Queue):
    """The admin's dashboard page: a proxy so that the admin index links to it."""

    class Meta:
        proxy = True
        verbose_name = verbose_name_plural = "dashboard"
