from django.db import models


class Effect(models.Model):
    """A side effect of a handler run: one row per execution of message ``key``."""

    key = models.BigIntegerField(db_index=True)
    attempt = models.PositiveIntegerField(default=0)
    pid = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"effect of {self.key} (attempt {self.attempt})"


class SignalLog(models.Model):
    signal = models.CharField(max_length=20)
    task_id = models.CharField(max_length=36)
    status = models.CharField(max_length=20)

    def __str__(self) -> str:
        return f"{self.signal} {self.task_id}"


class Run(models.Model):
    """One handler run, timed on the worker's clock (epoch seconds), for the limit tests."""

    key = models.BigIntegerField()
    group = models.CharField(max_length=50, blank=True, default="")
    started = models.FloatField()
    finished = models.FloatField()
    pid = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"run of {self.key}"
