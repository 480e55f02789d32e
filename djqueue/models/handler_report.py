"""What a handler reported while it ran: its progress, and the log records it emitted.

Both live beside the message, keyed by its id, not in its row: the claim's hot
table stays as narrow as before, a message that reports nothing costs nothing,
and both outlive the message's move to history (they are pruned with it, after
the queue's retention). Written by djqueue.storage.handler_reports.
"""

from __future__ import annotations

import logging

from django.db import models


class MessageProgress(models.Model):
    """The last progress a message's handler reported: one row per message."""

    message_id = models.BigIntegerField(primary_key=True)
    queue = models.ForeignKey("djqueue.Queue", on_delete=models.CASCADE, db_constraint=False,
                              related_name="+")
    #: The delivery that reported it (a retry starts from its own first report).
    attempt = models.PositiveIntegerField()
    fraction = models.FloatField(help_text="Done so far, from 0 to 1.")
    note = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "message progress"
        verbose_name_plural = "message progress"
        indexes = [models.Index(fields=["updated_at"], name="djqueue_progress_updated")]

    def __str__(self) -> str:
        return f"#{self.message_id} {self.percent}%"

    @property
    def percent(self) -> int:
        return round(self.fraction * 100)


class MessageLog(models.Model):
    """One log record emitted while a handler ran (bounded per delivery, see settings)."""

    id = models.BigAutoField(primary_key=True)
    message_id = models.BigIntegerField()
    queue = models.ForeignKey("djqueue.Queue", on_delete=models.CASCADE, db_constraint=False,
                              related_name="+")
    attempt = models.PositiveIntegerField()
    logged_at = models.DateTimeField()
    level = models.PositiveSmallIntegerField(help_text="The logging level number (20: INFO).")
    logger = models.CharField(max_length=100)
    text = models.TextField()

    class Meta:
        verbose_name = "handler log record"
        indexes = [
            models.Index(fields=["message_id", "id"], name="djqueue_log_message"),
            models.Index(fields=["logged_at"], name="djqueue_log_logged"),
        ]

    def __str__(self) -> str:
        return f"#{self.message_id} {self.level_name}: {self.text[:60]}"

    @property
    def level_name(self) -> str:
        return logging.getLevelName(self.level)
