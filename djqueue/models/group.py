"""Ordered groups: one row per (queue, group key), the lock that serialises a group."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class MessageGroup(models.Model):
    """Every change to which message of a group may be delivered locks this row first,
    and so does every claim under a per-key rate.

    ``last_acked_id`` is the newest message of the group acked so far; the
    consumer-side guard (``Queue.skip_stale``) compares deliveries against it.
    """

    # No index of its own: djqueue_group_unique begins with it (migration 0018).
    queue = models.ForeignKey("djqueue.Queue", on_delete=models.CASCADE, related_name="+",
                              db_index=False)
    key = models.CharField(max_length=200)
    last_acked_id = models.BigIntegerField(null=True, blank=True)
    touched_at = models.DateTimeField(default=timezone.now)
    #: The key's token bucket under the queue's ``group_rate_limit``: tokens as of
    #: ``refilled_at`` (epoch seconds on the database's clock), and until when the key
    #: has none left (claims pass its messages over until then).
    tokens = models.FloatField(default=0.0)
    refilled_at = models.FloatField(default=0.0)
    throttled_until = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "key"],
                                               name="djqueue_group_unique")]
        #: A claim under a per-key rate passes over the keys marked until later; MariaDB
        #: reads them once a claim (a materialised anti-join) by this index, not the
        #: whole table. Not (queue, throttled_until): MariaDB then chose that index for
        #: an ack's UPDATE ... WHERE queue_id = ? AND key IN (...), locked every key of
        #: the queue, and two acks deadlocked (tests/storage/test_ordered_groups.py).
        indexes = [models.Index(fields=["throttled_until"], name="djqueue_group_throttled")]

    def __str__(self) -> str:
        return f"{self.queue_id}/{self.key}"
