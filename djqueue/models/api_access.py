"""Who may use the HTTP API (djqueue.http), and on which queues: EMQ's model of clients,
hashed tokens and per-queue grants, in the project's own database."""

from __future__ import annotations

import re

from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

#: A grant's pattern: a queue name's characters, and * for any run of them.
PATTERN_RE = re.compile(r"^[A-Za-z0-9_.:*-]{1,100}\Z")  # \Z: see QUEUE_NAME_RE
validate_pattern = RegexValidator(
    PATTERN_RE, "A queue or topic name, or a pattern: 1-100 letters, digits, '_', '.', ':', "
                "'-', and * for any run of them.")


class ApiPermission(models.IntegerChoices):
    """What a grant allows on the queues it names. FULL_CONTROL includes the other two,
    and adds peek, attributes' changes, redrive and purge."""

    SEND = 1, "send"
    RECEIVE = 2, "receive"
    FULL_CONTROL = 3, "full control"


class ApiClient(models.Model):
    """A service that calls the HTTP API: its tokens, its grants and its quota."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    is_active = models.BooleanField(
        default=True, help_text="An inactive client's tokens are refused (401).")
    requests_per_second = models.FloatField(
        null=True, blank=True,
        help_text="Its quota: requests a second, each API server process (empty: none). "
                  "A request beyond it gets 429.")
    request_burst = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests it may make at once beyond the rate "
                                         "(empty: one second's worth).")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        verbose_name = "API client"

    def __str__(self) -> str:
        return self.name


class ApiToken(models.Model):
    """One bearer token of a client. The token is shown once, at its creation; the row
    keeps its public ``key`` (to find it) and the SHA-256 of its secret part."""

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="tokens")
    key = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True,
                                      help_text="Refused from then on (empty: never).")
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True,
                                        help_text="Written at most once a minute.")

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"djq_{self.key}_…"


class ApiGrant(models.Model):
    """A client's permission on the queues (and topics) a name or a pattern matches:
    ``orders`` names one queue; ``orders.*`` every name that starts with ``orders.``;
    ``*`` every queue."""

    # No index of its own: djqueue_api_grant_unique begins with it (migration 0018).
    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="grants",
                               db_index=False)
    queue_pattern = models.CharField(
        max_length=100, validators=[validate_pattern],
        help_text="A queue or topic name, or a pattern where * stands for any characters.")
    permission = models.PositiveSmallIntegerField(choices=ApiPermission.choices)

    class Meta:
        ordering = ["client", "queue_pattern"]
        verbose_name = "API grant"
        constraints = [models.UniqueConstraint(fields=["client", "queue_pattern", "permission"],
                                               name="djqueue_api_grant_unique")]
        permissions = [
            ("api_send", "Can send through the HTTP API (signed-in users)"),
            ("api_receive", "Can receive through the HTTP API (signed-in users)"),
            ("api_full_control", "Has full control through the HTTP API (signed-in users)"),
        ]

    def __str__(self) -> str:
        return f"{self.client}: {self.get_permission_display()} on {self.queue_pattern}"
