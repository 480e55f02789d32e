"""A message as the peek listings show it: ``djqueue_queues peek --json`` and the HTTP
API's ``GET /queues/{queue}/messages`` give the same fields, read from one place.

They show what a hand edit or another tool left in a row as it is, so one bad row does
not end the listing that an operator reads to find it: a body that is not JSON as its
text, and a time no driver reads back (None from djqueue.api.queue_operations.peek) as
null.
"""

from __future__ import annotations

from typing import Any

from djqueue.models import Message, State
from djqueue.models.shown_times import iso_or_null

#: How much of a body that is not JSON a listing shows.
UNREADABLE_BODY_CHARS = 1000


def as_json(message: Message) -> dict[str, Any]:
    """``message``'s fields, JSON-ready, without its lease token."""
    try:
        payload: Any = message.payload
    except ValueError:
        payload = {"unreadable_body": message.encoded_body[:UNREADABLE_BODY_CHARS]}
    return {"id": message.pk, "state": State(message.state).name.lower(),
            "attempts": message.attempts, "priority": message.priority,
            "group_key": message.group_key, "sent_at": iso_or_null(message.sent_at),
            "visible_at": iso_or_null(message.visible_at), "headers": message.headers or {},
            "payload": payload, "errors": message.errors or []}
