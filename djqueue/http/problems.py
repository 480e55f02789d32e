"""Errors as problem documents (RFC 9457): ``application/problem+json`` with ``type``,
``title``, ``status`` and ``detail``. The type is ``urn:djqueue:error:<class>``, the
class of the djqueue error (or of the API's own: InvalidRequest, Unauthenticated...)
that the request met, so a client can branch on it in any language."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse

from djqueue.exceptions import (
    InvalidCondition,
    InvalidMessage,
    NotOwner,
    PayloadTooLarge,
    QueueFull,
    QueueNotFound,
)
from djqueue.http.access import Forbidden, OverQuota, Unauthenticated
from djqueue.http.long_polls import TooManyConditions

TYPE_PREFIX = "urn:djqueue:error:"
CONTENT_TYPE = "application/problem+json"


class InvalidRequest(Exception):
    """The request is not what the endpoint takes (its body, a field, a parameter): 400."""


class RequestTooLarge(Exception):
    """The body is larger than HTTP_MAX_BODY_BYTES: 413."""


class UnsupportedMediaType(Exception):
    """The body is not ``application/json``: 415."""


#: Exception class -> (status, title); the first match in order wins (subclasses first).
STATUSES: list[tuple[type[Exception], int, str]] = [
    (InvalidRequest, 400, "Invalid request"),
    (Unauthenticated, 401, "Not authenticated"),
    (Forbidden, 403, "No grant"),
    (QueueNotFound, 404, "Not found"),
    (NotOwner, 409, "Lease lost"),
    (PayloadTooLarge, 413, "Payload too large"),
    (RequestTooLarge, 413, "Request too large"),
    (UnsupportedMediaType, 415, "Unsupported media type"),
    (QueueFull, 429, "Queue full"),
    (OverQuota, 429, "Quota used up"),
    (TooManyConditions, 429, "Too many waiting conditions"),
    (InvalidMessage, 400, "Invalid message"),
    (InvalidCondition, 400, "Invalid condition"),
]


def status_of(exc: Exception) -> tuple[int, str] | None:
    for kind, status, title in STATUSES:
        if isinstance(exc, kind):
            return status, title
    return None


def problem(status: int, kind: str, title: str, detail: str, **extra: Any) -> HttpResponse:
    body = {"type": TYPE_PREFIX + kind, "title": title, "status": status, "detail": detail,
            **extra}
    response = HttpResponse(json.dumps(body), status=status, content_type=CONTENT_TYPE)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="djqueue"'
    return response


def from_exception(exc: Exception, **extra: Any) -> HttpResponse | None:
    """The problem document of a known exception; None for any other (a bug: 500)."""
    found = status_of(exc)
    if found is None:
        return None
    status, title = found
    response = problem(status, type(exc).__name__, title, str(exc)[:2000], **extra)
    if isinstance(exc, OverQuota):
        response["Retry-After"] = str(max(1, round(exc.seconds + 0.5)))
    return response
