"""Live processes registered to serve queues: one heartbeat row each.

Most are workers; an HTTP API server holding long polls and a process whose
``receive()`` waits register too (with no threads), so a sender's datagram wakes
them and the reaper removes their rows when they die. A long-running reaper
registers (no queues, no threads, no wake-up address) so that what runs the upkeep,
and its host's clock, which judges lease ends, are seen where the workers are.
``kind`` says which, so the metrics, the dashboard and ``djqueue_workers`` can tell
them apart.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class ProcessKind(models.TextChoices):
    """What a registered process does (djqueue.storage.registration)."""

    WORKER = "worker", "worker"
    HTTP = "http", "HTTP API server"
    RECEIVE = "receive", "waiting receive"
    REAPER = "reaper", "reaper"


class Worker(models.Model):
    """A registered process. ``id`` is kind:host:pid:uuid for an HTTP server, a
    receiver or a reaper, host:pid:uuid for a worker; ``lock_key`` names its session
    lock."""

    id = models.CharField(max_length=100, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    pid_namespace = models.CharField(
        max_length=80, blank=True, default="", db_default="",
        help_text="Its host's boot id and its pid namespace: where its pid names it.")
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
    kind = models.CharField(max_length=10, choices=ProcessKind.choices,
                            default=ProcessKind.WORKER)
    clock_offset = models.FloatField(
        null=True, blank=True,
        help_text="Seconds its host's clock was ahead of this database's (behind: below "
                  "zero) at its last comparison; empty before the first, or on SQLite.")

    class Meta:
        ordering = ["started_at"]

    def __str__(self) -> str:
        return self.id
