"""The permissions behind the admin's operations, each checked on the server."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

VIEW_DASHBOARD = "djqueue.view_queue"
PAUSE = "djqueue.pause_queue"
PURGE = "djqueue.purge_queue"
REDRIVE = "djqueue.redrive_queue"
RETRY = "djqueue.retry_message"
VISIBILITY = "djqueue.change_visibility"
DELETE = "djqueue.delete_message"
REPLAY = "djqueue.replay_group"
RETRY_WORKFLOW = "djqueue.retry_workflow"
CANCEL_WORKFLOW = "djqueue.cancel_workflow"


def require(request: HttpRequest, permission: str) -> None:
    if not (request.user.is_active and request.user.is_staff
            and request.user.has_perm(permission)):
        raise PermissionDenied(f"This needs the permission {permission}.")


class OperationPermissions:
    """``has_<name>_permission`` methods, so admin actions can say ``permissions=[name]``
    (Django then offers and runs an action only for users who hold it)."""

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(PAUSE)

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(PURGE)

    def has_redrive_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(REDRIVE)

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RETRY)

    def has_visibility_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(VISIBILITY)

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(REPLAY)
