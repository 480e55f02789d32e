"""The stored state of a django.tasks task run on djqueue (what ``get_result`` reads)."""

from __future__ import annotations

from django.db import models


class TaskStatus(models.TextChoices):
    READY = "READY"
    RUNNING = "RUNNING"
    SUCCESSFUL = "SUCCESSFUL"
    FAILED = "FAILED"


FINISHED_STATUSES = (TaskStatus.SUCCESSFUL, TaskStatus.FAILED)


class TaskRecord(models.Model):
    id = models.CharField(max_length=36, primary_key=True)
    task_path = models.CharField(max_length=255)
    backend = models.CharField(max_length=100)
    queue_name = models.CharField(max_length=100)
    priority = models.SmallIntegerField(default=0)
    run_after = models.DateTimeField(null=True, blank=True)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=TaskStatus.choices, default=TaskStatus.READY)
    enqueued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    return_value = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    worker_ids = models.JSONField(default=list, blank=True)
    message_id = models.BigIntegerField(null=True, blank=True)
    #: Set while the task is pending when it was enqueued with a unique key;
    #: the unique constraint makes concurrent duplicate enqueues collide.
    unique_key = models.CharField(max_length=64, null=True, blank=True, unique=True)
    cancel_requested = models.BooleanField(default=False)

    class Meta:
        verbose_name = "task result"
        indexes = [models.Index(fields=["status", "finished_at"], name="djqueue_task_status")]

    def __str__(self) -> str:
        return f"{self.task_path} {self.id} ({self.status})"
