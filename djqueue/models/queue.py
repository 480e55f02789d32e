"""A queue is a row: its options govern leases, retries and limits."""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import models

from djqueue import durations, rates
from djqueue.conf import get_settings
from djqueue.models.names import is_valid_name

#: Steps a backoff schedule may have (the last one repeats).
MAX_BACKOFF_STEPS = 100
#: Deliveries a queue may allow before dead-lettering.
MAX_ATTEMPTS = 1000


def is_max_attempts(value: object) -> bool:
    """Whether ``value`` can be a number of deliveries allowed (a queue's, a task's, a
    task backend's default): an int (not a bool) from 1 to MAX_ATTEMPTS."""
    return isinstance(value, int) and not isinstance(value, bool) and (
        1 <= value <= MAX_ATTEMPTS)


def validate_queue_name(name: str) -> None:
    if not is_valid_name(name):
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


def validate_rate(value: object) -> None:
    if value in ("", None):
        return
    try:
        rates.parse_rate(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def validate_burst(value: object) -> None:
    try:
        rates.check_burst(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def default_visibility_timeout() -> float:
    return get_settings().VISIBILITY_TIMEOUT


def default_max_attempts() -> int:
    return get_settings().MAX_ATTEMPTS


def default_backoff() -> list[float]:
    return list(get_settings().BACKOFF)


def default_retry_jitter() -> float:
    return get_settings().RETRY_JITTER


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
    retry_jitter = models.FloatField(
        default=default_retry_jitter,
        help_text="Each backoff step is lengthened by up to this fraction, at random "
                  "(0.1: up to 10 % longer), so that messages that failed together do not "
                  "retry together; 0: the exact steps.")
    dead_letter_queue = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="Where dead messages go; without one they stay in this queue, state dead.")
    retention = models.FloatField(
        default=default_retention, help_text="Seconds finished messages are kept in history.")
    message_ttl = models.FloatField(
        null=True, blank=True,
        help_text="Seconds a message may wait once visible: one not delivered by then is "
                  "dead-lettered unrun (a send's expires overrides it); empty: no limit.")
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
    # Limits (djqueue.storage.claim_limits): enforced in the claim's transaction, so they
    # hold across every worker, process and host.
    rate_limit = models.CharField(
        max_length=20, blank=True, default="", validators=[validate_rate],
        help_text="At most this many messages start a period, e.g. 50/s, 300/m, 1000/h; "
                  "empty: no limit.")
    rate_burst = models.PositiveIntegerField(
        null=True, blank=True, validators=[validate_burst],
        help_text="Starts allowed at once after a quiet spell (1: evenly spaced); empty: "
                  "a tenth of a second's worth, at least 1.")
    concurrency_limit = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="At most this many messages claimed at once; empty: no limit, 0: none.")
    group_concurrency = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="At most this many messages of one group key in flight at once "
                  "(ordered queues: 1, in order).")
    group_rate_limit = models.CharField(
        max_length=20, blank=True, default="", validators=[validate_rate],
        help_text="At most this many messages of one group key start a period, e.g. 5/s.")
    group_rate_burst = models.PositiveIntegerField(
        null=True, blank=True, validators=[validate_burst],
        help_text="Starts of one group key allowed at once after a quiet spell; empty: a "
                  "tenth of a second's worth, at least 1.")
    created_at = models.DateTimeField(auto_now_add=True)
    #: Exceptions a worker or the reaper met while serving this queue alone (an absurd
    #: value in its row, say): each is logged and counted, and the process goes on
    #: with the other queues. The dashboard shows them.
    errors_seen = models.PositiveIntegerField(
        default=0, editable=False,
        help_text="Errors a worker or the reaper met serving this queue alone.")
    last_error = models.TextField(blank=True, default="", editable=False)
    #: A partitioned queue's directory row, on the home database: the databases that take
    #: its new messages, in the order keys hash to them (djqueue.storage.partitions).
    #: None for a plain queue, and for each partition's own row.
    partitions = models.JSONField(
        null=True, blank=True, editable=False,
        help_text="Databases its new messages go to, when it is partitioned.")
    #: Partitions being removed: they take no new message and are served until empty.
    draining_partitions = models.JSONField(
        default=list, blank=True, editable=False,
        help_text="Partitions being removed: served until empty, sent nothing.")

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
        # No rate limit is stored as "" (the column is not nullable); None says the same.
        for rate in ("rate_limit", "group_rate_limit"):
            if getattr(self, rate) is None:
                setattr(self, rate, "")
        # (name, upper bound, whether 0 is refused): retention 0 keeps no history.
        checks = [("visibility_timeout", durations.MAX_LEASE, True),
                  ("retention", durations.MAX_RETENTION, False),
                  ("dedup_window", durations.MAX_RETENTION, True),
                  ("message_ttl", durations.MAX_RETENTION, True)]
        for name, high, positive in checks:
            value = getattr(self, name)
            if value is None and name != "retention":
                continue
            try:
                durations.check(value, name, high=high, positive=positive)
            except ValueError as exc:
                raise ValidationError({name: str(exc)}) from None
        jitter = self.retry_jitter
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not (
                0 <= jitter <= 1):
            raise ValidationError({"retry_jitter": f"Must be a fraction from 0 to 1, got "
                                                   f"{jitter!r}."})
        attempts = self.max_attempts  # still the value given, where its field refused it
        if attempts is not None and not is_max_attempts(attempts):
            raise ValidationError({"max_attempts": f"Must be 1 to {MAX_ATTEMPTS}."})
        if self.group_concurrency == 0:
            raise ValidationError({"group_concurrency": "Must be at least 1 (or empty)."})
        if self.ordered and self.group_concurrency not in (None, 1):
            raise ValidationError({"group_concurrency": "An ordered queue runs one message of "
                                   "a group key at a time: leave this empty or 1."})
        if self.dead_letter_queue_id is not None and self.dead_letter_queue_id == self.pk:
            raise ValidationError(
                {"dead_letter_queue": "A queue cannot be its own dead-letter queue."})

    # Limits as the claim uses them. A stored rate that no longer parses (a row edited
    # by hand) holds the queue back rather than let it run unlimited.

    @property
    def limits_claims(self) -> bool:
        """Whether a claim from this queue must consult its limits (False: the plain path)."""
        return bool(self.rate_limit or self.group_rate_limit
                    or self.concurrency_limit is not None)

    def rate(self) -> rates.Rate | None:
        return _stored_rate(self.rate_limit)

    def group_rate(self) -> rates.Rate | None:
        return _stored_rate(self.group_rate_limit)

    def burst(self) -> int:
        return _stored_burst(self.rate_burst, self.rate())

    def group_burst(self) -> int:
        return _stored_burst(self.group_rate_burst, self.group_rate())

    @property
    def group_holders(self) -> int | None:
        """How many messages of one group key may hold it (ready, scheduled or claimed) at
        once: 1 in an ordered queue, ``group_concurrency`` where set, else no limit."""
        if self.ordered:
            return 1
        return self.group_concurrency or None

    def retry_delay(self, attempt: int) -> timedelta:
        """Delay before the retry that follows failed delivery number ``attempt``
        (1-based): its backoff step, lengthened by up to ``retry_jitter`` of it at random."""
        return durations.stepped_delay(self.backoff, attempt, self.retry_jitter)

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


def _stored_rate(text: str) -> rates.Rate | None:
    if not text:
        return None
    try:
        return rates.parse_rate(text)
    except ValueError:
        return rates.Rate(0, 1.0)


def _stored_burst(value: object, rate: rates.Rate | None) -> int:
    if value is None:
        return rates.default_burst(rate)
    try:
        return rates.check_burst(value)
    except ValueError:
        return 1


class Dashboard(Queue):
    """The admin's dashboard page: a proxy so that the admin index links to it."""

    class Meta:
        proxy = True
        verbose_name = verbose_name_plural = "dashboard"
