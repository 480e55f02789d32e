"""Finished messages: an append-only record for statistics, trace and export."""

from __future__ import annotations

from django.db import models


class Outcome(models.IntegerChoices):
    ACKED = 1, "acked"
    DELETED = 2, "deleted"


class History(models.Model):
    """One row per message that left the queue for good.

    The id is the message's id. Bodies are not kept: history is sized for
    statistics and export, and pruned after the queue's retention.
    """

    id = models.BigIntegerField(primary_key=True)
    # No index of its own: djqueue_history_finished (queue_id, finished_at) serves every
    # lookup by queue, and each ack inserts into one index fewer.
    queue = models.ForeignKey("djqueue.Queue", on_delete=models.CASCADE, db_constraint=False,
                              db_index=False, related_name="+")
    outcome = models.PositiveSmallIntegerField(choices=Outcome.choices)
    priority = models.SmallIntegerField(default=0)
    attempts = models.PositiveIntegerField()
    size = models.PositiveIntegerField(help_text="Encoded payload size in bytes.")
    worker = models.CharField(max_length=100, blank=True, default="")
    group_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 as Message
    sent_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField()

    #: True on the finished message a send returned instead of a new one, its dedup key
    #: being taken (djqueue.api.sending.send); not stored.
    duplicate = False

    class Meta:
        verbose_name = "finished message"
        verbose_name_plural = "history"
        indexes = [models.Index(fields=["queue", "finished_at"], name="djqueue_history_finished")]

    def __str__(self) -> str:
        return f"#{self.id} {self.get_outcome_display()}"
