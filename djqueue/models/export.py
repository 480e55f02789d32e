"""Watermarks of incremental exports (``manage.py djqueue_export --incremental``)."""

from __future__ import annotations

from django.db import models

from djqueue.models.shown_times import shown_time


class ExportRun(models.Model):
    """One successful export. The newest run of a target ends where the next one begins."""

    target = models.CharField(max_length=500, help_text="The output directory.")
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(help_text="Rows finished before this were exported.")
    rows = models.PositiveBigIntegerField(default=0)
    finished_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["target", "window_end"], name="djqueue_export_target")]

    def __str__(self) -> str:
        return f"{self.target} until {shown_time(self.window_end, '%Y-%m-%d %H:%M:%S')}"
