"""Live worker processes: one heartbeat row each."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Worker(models.Model):
    """A registered worker. ``id`` is host:pid:uuid; ``lock_key`` names its session lock."""

    id = models.CharField(max_length=100, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    lock_key = models.CharField(max_length=32, unique=True)
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now, db_index=True)
    holding = models.PositiveIntegerField(default=0, help_text="Messages held at the last beat.")
    wake_address = models.CharField(max_length=100, blank=True, default="",
                                    help_text="host:port where it hears wake-up datagrams, if any.")
    held_ids = models.JSONField(default=list, blank=True,
                                help_text="The first few of them (ids), at the last beat.")

    class Meta:
        ordering = ["started_at"]

    def __str__(self) -> str:
        return self.id
