"""Queue limits' state: the row every limited claim of a queue locks first."""

from __future__ import annotations

from django.db import models


class QueueLimiter(models.Model):
    """One per queue with a rate or concurrency limit (djqueue.storage.claim_limits).

    A claim from a limited queue locks this row before it counts or takes
    anything, so concurrent claimers (threads, processes, hosts) decide one
    after another. The token bucket of the queue's rate lives here, on the
    database's clock; so do the figures the dashboard shows of the limit's use.
    """

    queue = models.OneToOneField("djqueue.Queue", primary_key=True, on_delete=models.CASCADE,
                                 related_name="+")
    #: The rate's token bucket: tokens as of ``refilled_at`` (epoch seconds, database clock).
    tokens = models.FloatField(default=0.0)
    refilled_at = models.FloatField(default=0.0)
    #: Since when claims have found the limit reached with messages ready (None: not now).
    throttled_since = models.DateTimeField(null=True, blank=True)
    #: Seconds, in all, that ready messages waited on the limit (closed spells).
    throttled_seconds = models.FloatField(default=0.0)
    #: Claims the limit cut short.
    held_back = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"limits of queue {self.queue_id}"
