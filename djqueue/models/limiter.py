"""Queue limits' state: the row every limited claim of a queue locks first."""

from __future__ import annotations

from django.db import models


class QueueLimiter(models.Model):
    """One per queue with a rate or concurrency limit (djqueue.storage.claim_limits).

    A claim from a limited queue locks this row before it counts or takes
    anything, so concurrent claimers (threads, processes, hosts) decide one
    after another. The token bucket of the queue's rate lives here, on the
    database's clock; so do the figures the dashboard shows of the limit's use.

    The row also keeps a copy of the queue's limits, written whenever the queue
    row is saved (djqueue.storage.claim_limits.copy_limits): the claim reads
    them with the lock it takes anyway, so a changed limit holds from the next
    claim without a read of the queue's row.
    """

    queue = models.OneToOneField("djqueue.Queue", primary_key=True, on_delete=models.CASCADE,
                                 related_name="+")
    rate_limit = models.CharField(max_length=20, blank=True, default="")
    rate_burst = models.PositiveIntegerField(null=True, blank=True)
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    group_rate_limit = models.CharField(max_length=20, blank=True, default="")
    group_rate_burst = models.PositiveIntegerField(null=True, blank=True)
    #: The rate's token bucket: tokens as of ``refilled_at`` (epoch seconds, database clock).
    tokens = models.FloatField(default=0.0)
    refilled_at = models.FloatField(default=0.0)
    #: Since when (epoch seconds) claims have found the limit reached with messages
    #: ready (None: not now).
    throttled_since = models.FloatField(null=True, blank=True)
    #: Seconds, in all, that ready messages waited on the limit (closed spells).
    throttled_seconds = models.FloatField(default=0.0)
    #: Claims the limit cut short.
    held_back = models.BigIntegerField(default=0)
    #: At least as many of the queue's messages as are claimed now (-1: unknown): the
    #: last exact count, plus every claim since. A claim counts the claimed rows
    #: again only when this bound leaves too little room, or at least once a second
    #: (see djqueue.storage.claim_limits).
    claimed_bound = models.BigIntegerField(default=-1)
    #: When the claimed rows were last counted (epoch seconds, database clock).
    counted_at = models.FloatField(default=0.0)

    #: The queue's fields that claims read here (group_concurrency is kept by the
    #: message states instead, see djqueue.storage.ordered_groups).
    COPIED = ("rate_limit", "rate_burst", "concurrency_limit", "group_rate_limit",
              "group_rate_burst")

    def __str__(self) -> str:
        return f"limits of queue {self.queue_id}"
