"""Deduplication keys: the unique constraint that makes ``send(dedup_key=...)`` race-free."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class DedupKey(models.Model):
    """A taken key. It is free again once ``expires_at`` passed (queues with a
    dedup window) or, without a window, once ``message_id`` is no longer pending."""

    # No index of its own: djqueue_dedup_unique begins with it (migration 0018).
    queue = models.ForeignKey("djqueue.Queue", on_delete=models.CASCADE, related_name="+",
                              db_index=False)
    key = models.CharField(max_length=200)
    message_id = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "dedup key"
        constraints = [models.UniqueConstraint(fields=["queue", "key"],
                                               name="djqueue_dedup_unique")]

    def __str__(self) -> str:
        return self.key
