"""One row per scheduled minute of a periodic task: the unique pair makes one scheduler win."""

from django.db import models


class PeriodicTick(models.Model):
    name = models.CharField(max_length=100)
    tick_at = models.DateTimeField()
    task_result_id = models.CharField(max_length=36, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "tick_at"],
                                               name="djqueue_periodic_tick_once")]

    def __str__(self) -> str:
        return f"{self.name} @ {self.tick_at:%Y-%m-%d %H:%M}"
