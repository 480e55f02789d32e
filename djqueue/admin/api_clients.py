"""The HTTP API's clients in the admin: their grants, their tokens (issued, rotated and
revoked from here, with the ``change`` permission on API clients), their quotas.

A token's text is shown once, in the message after it is issued; only its hash is
stored, so it cannot be shown again.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from djqueue.admin.row_reading import RowReadingAdmin, RowReadingInline
from djqueue.http import access
from djqueue.models import ApiClient, ApiGrant, ApiToken
from djqueue.storage.unreadable_rows import without_times


class ApiGrantInline(RowReadingInline):
    model = ApiGrant
    extra = 1
    fields = ["queue_pattern", "permission"]


class ApiTokenInline(RowReadingInline):
    model = ApiToken
    extra = 0
    can_delete = False
    fields = ["key", "created_at", "expires_at", "revoked_at", "last_used_at"]
    readonly_fields = ["key", "created_at", "revoked_at", "last_used_at"]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # tokens are issued by the action, which shows the text once


@admin.register(ApiClient)
class ApiClientAdmin(RowReadingAdmin):
    list_display = ["name", "is_active", "requests_per_second", "grants_shown",
                    "usable_tokens", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["name", "description"]
    inlines = [ApiGrantInline, ApiTokenInline]
    readonly_fields = ["created_at"]
    actions = ["issue_token", "rotate_tokens", "revoke_tokens"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiClient]:
        # Counted in SQL by the API's own rule (access.usable): no token's time is read,
        # so one a hand edit left unreadable fails no list, and the count agrees with
        # the API on it (MariaDB's zero date has passed).
        return super().get_queryset(request).prefetch_related("grants").annotate(
            usable_token_count=Count("tokens", filter=access.usable(timezone.now(),
                                                                    through="tokens__")))

    @admin.display(description="grants")
    def grants_shown(self, client: ApiClient) -> str:
        return ", ".join(f"{g.get_permission_display()} on {g.queue_pattern}"
                         for g in client.grants.all()) or "none"

    @admin.display(description="usable tokens", ordering="usable_token_count")
    def usable_tokens(self, client: ApiClient) -> int:
        return client.usable_token_count  # type: ignore[attr-defined]  # get_queryset's

    @admin.action(description="Issue a new token (shown once)", permissions=["change"])
    def issue_token(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        for client in without_times(queryset):
            token = access.issue_token(client)
            messages.success(request, f"New token for {client.name} (copy it now; it is not "
                                      f"shown again): {token}")

    @admin.action(description="Rotate: a new token, the others expire in an hour",
                  permissions=["change"])
    def rotate_tokens(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        for client in without_times(queryset):
            token = access.rotate_tokens(client, overlap=3600)
            messages.success(request, f"New token for {client.name} (copy it now; its other "
                                      f"tokens expire in an hour): {token}")

    @admin.action(description="Revoke every token now", permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiClient]) -> None:
        # The ids, not the list's query: it counts tokens, and MySQL refuses an update
        # of a table that its own subquery reads (error 1093).
        chosen = list(queryset.values_list("pk", flat=True))
        count = ApiToken.objects.using(queryset.db).filter(
            client__in=chosen, revoked_at__isnull=True).update(revoked_at=timezone.now())
        messages.success(request, f"Revoked {count} token(s).")
