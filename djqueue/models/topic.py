"""Topics with consumer groups: bodies stored once, a queue per subscription.

A *cluster* group has one subscription: its consumers share one queue, so
each message goes to one of them. A *broadcast* group has a subscription per
registered consumer, each with its own queue, so every consumer gets every
message. Publishing stores the body once (:class:`Body`) and inserts one
small delivery row per subscription that references it.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from djqueue import durations
from djqueue.conf import get_settings
from djqueue.models.queue import default_retention, validate_queue_name


class Topic(models.Model):
    name = models.CharField(max_length=40, unique=True, validators=[validate_queue_name])
    retention = models.FloatField(
        default=default_retention,
        help_text="Seconds published bodies are kept for replay after every group is done.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        try:
            durations.check(self.retention, "retention", high=durations.MAX_RETENTION,
                            positive=False)
        except ValueError as exc:
            raise ValidationError({"retention": str(exc)}) from None

    def retention_seconds(self) -> float:
        """The retention as it may be used (see Queue.retention_seconds)."""
        return durations.clamp(self.retention, high=durations.MAX_RETENTION,
                               default=get_settings().RETENTION)


class Body(models.Model):
    """A published message, stored once and referenced by its deliveries."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: djqueue_body_published begins with it (migration 0018).
    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="+", db_index=False)
    body = models.TextField()
    headers = models.JSONField(null=True, blank=True)
    priority = models.SmallIntegerField(default=0)
    group_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 as Message
    published_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "published message"
        indexes = [models.Index(fields=["topic", "published_at"], name="djqueue_body_published")]

    def __str__(self) -> str:
        return f"{self.topic_id}#{self.id}"


class GroupMode(models.TextChoices):
    CLUSTER = "cluster"
    BROADCAST = "broadcast"


class ConsumerGroup(models.Model):
    # No index of its own: djqueue_group_name_unique begins with it (migration 0018).
    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="groups",
                              db_index=False)
    name = models.CharField(max_length=20, validators=[validate_queue_name])
    mode = models.CharField(max_length=10, choices=GroupMode.choices, default=GroupMode.CLUSTER)
    queue_options = models.JSONField(
        default=dict, blank=True, help_text="Options of the queues made for its subscriptions.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        permissions = [("replay_group", "Can replay a consumer group from a time")]
        constraints = [models.UniqueConstraint(fields=["topic", "name"],
                                               name="djqueue_group_name_unique")]

    def __str__(self) -> str:
        return f"{self.topic.name}:{self.name}"


class Subscription(models.Model):
    """Where a group's deliveries go: its queue (cluster), or one consumer's queue (broadcast)."""

    # No index of its own: djqueue_subscription_unique begins with it (migration 0018).
    group = models.ForeignKey(ConsumerGroup, on_delete=models.CASCADE,
                              related_name="subscriptions", db_index=False)
    consumer = models.CharField(max_length=36, blank=True, default="")
    queue = models.OneToOneField("djqueue.Queue", on_delete=models.PROTECT, related_name="+")
    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "consumer"],
                                               name="djqueue_subscription_unique")]

    def __str__(self) -> str:
        return self.queue.name
