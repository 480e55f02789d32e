"""Message trace: an append-only event log for queues with ``trace`` on."""

from __future__ import annotations

from django.db import models


class Event(models.TextChoices):
    SENT = "sent"
    CLAIMED = "claimed"
    ACKED = "acked"
    RELEASED = "released"
    NACKED = "nacked"
    RETRIED = "retried"
    DEAD_LETTERED = "dead_lettered"
    REDRIVEN = "redriven"
    DELETED = "deleted"
    PURGED = "purged"
    SKIPPED = "skipped"


class TraceEvent(models.Model):
    id = models.BigAutoField(primary_key=True)
    message_id = models.BigIntegerField()
    queue = models.ForeignKey("djqueue.Queue", on_delete=models.CASCADE, db_constraint=False,
                              related_name="+")
    event = models.CharField(max_length=20, choices=Event.choices)
    at = models.DateTimeField()
    attempt = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=100, blank=True, default="")
    detail = models.TextField(blank=True, default="")

    class Meta:
        verbose_name = "trace event"
        indexes = [
            models.Index(fields=["message_id", "id"], name="djqueue_trace_message"),
            models.Index(fields=["at"], name="djqueue_trace_at"),
        ]

    def __str__(self) -> str:
        return f"#{self.message_id} {self.event}"
