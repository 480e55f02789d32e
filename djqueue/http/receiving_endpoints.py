"""Receiving over HTTP: a receive that may wait (a long poll on the event loop), and
ack, nack and extend by receipt; for a queue, or for a topic's consumer group.

A received message carries a ``receipt`` (its id and lease token). Ack, nack and
extend take receipts, so only the receiver of a delivery can finish it; a receipt
whose lease was lost gets 409, with what was done for the others.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse

from djqueue import durations
from djqueue.api import consumer_groups
from djqueue.api.queues import get_queue
from djqueue.api.receiving import MAX_OWNER_CHARS, receive
from djqueue.conf import get_settings
from djqueue.exceptions import NotOwner
from djqueue.http import access, bodies, long_polls
from djqueue.http.database_threads import in_database
from djqueue.http.endpoint_base import granted, json_response
from djqueue.http.problems import InvalidRequest
from djqueue.models import ApiPermission, Message, Queue
from djqueue.models.shown_times import iso_or_null
from djqueue.storage import partitions, placement
from djqueue.storage.transitions import MAX_ERROR_CHARS, ack_many, extend, fail, release

RECEIPT_RE = re.compile(r"^([1-9][0-9]{0,18})\.([0-9a-f]{32})\Z")
#: Receipts one ack, nack or extend takes.
MAX_RECEIPTS = 1000


@dataclass
class ReceiveRequest:
    max_messages: int
    visibility_timeout: float | None
    wait: float
    where: str | None
    owner: str


def _receive_request(request: HttpRequest, caller: access.Caller) -> ReceiveRequest:
    body = bodies.json_body(request)
    bodies.check_fields(body, {"max_messages", "visibility_timeout", "wait", "where"})
    settings = get_settings()
    return ReceiveRequest(
        max_messages=bodies.whole(body, "max_messages", low=1, high=settings.HTTP_MAX_BATCH,
                                  default=1),
        visibility_timeout=bodies.number(body, "visibility_timeout", low=0,
                                         high=durations.MAX_LEASE, default=None,
                                         low_open=True),
        wait=bodies.number(body, "wait", low=0, high=settings.HTTP_MAX_WAIT, default=0),
        where=bodies.text(body, "where", longest=2000, default=None),
        owner=f"http:{caller.name}"[:MAX_OWNER_CHARS])


async def _long_poll(request: HttpRequest, name: str, permission_on: str,
                     queues_of: Callable[[], list[Queue]]) -> HttpResponse:
    def first() -> tuple[ReceiveRequest, str, list[Queue]]:
        caller = granted(request, permission_on, ApiPermission.RECEIVE)
        return _receive_request(request, caller), caller.name, queues_of()

    wanted, caller, queues = await in_database(first)
    names = tuple(q.name for q in queues)

    def claim() -> list[dict[str, Any]]:
        return [_delivered(m) for m in receive(
            list(names), max_messages=wanted.max_messages,
            visibility_timeout=wanted.visibility_timeout, owner=wanted.owner,
            where=wanted.where)]

    messages = await long_polls.waiting_receives().receive(
        (names, wanted.where), wanted.wait, lambda: in_database(claim), wanted.max_messages,
        caller=caller)
    return json_response({"messages": messages})


def _delivered(message: Message) -> dict[str, Any]:
    return {"id": message.pk, "receipt": f"{message.pk}.{message.lease_token}",
            "queue": message.queue.name, "payload": message.payload,
            "headers": message.headers or {}, "priority": message.priority,
            "group_key": message.group_key, "attempts": message.attempts,
            "sent_at": iso_or_null(message.sent_at), "lease_expires_at": iso_or_null(message.visible_at)}


async def receive_messages(request: HttpRequest, queue: str) -> HttpResponse:
    return await _long_poll(request, queue, queue, lambda: [get_queue(queue)])


def _receipts(body: dict[str, Any]) -> dict[int, set[str]]:
    """Message id -> the leases the receipts give it: one, except where the partitions of
    a partitioned queue each hold a message of that id."""
    receipts = bodies.listed(body, "receipts", longest=MAX_RECEIPTS)
    found: dict[int, set[str]] = {}
    for receipt in receipts:
        match = RECEIPT_RE.match(receipt) if isinstance(receipt, str) else None
        if not match:
            raise InvalidRequest(f"{str(receipt)[:80]!r} is not a receipt (as a receive "
                                 "returned it: '<id>.<lease>').")
        found.setdefault(int(match.group(1)), set()).add(match.group(2))
    return found


def _finish(request: HttpRequest, permission_on: str, queues_of: Callable[[], list[Queue]],
            fields: set[str], act: Callable[[list[Message], dict[str, Any]], list[Message]],
            ) -> dict[str, Any]:
    """Ack, nack or extend: the messages the receipts name, in ``queues_of()``, each with
    the receipt's lease (only its holder's lease matches the row's)."""
    granted(request, permission_on, ApiPermission.RECEIVE)
    body = bodies.json_body(request)
    bodies.check_fields(body, {"receipts", *fields})
    receipts = _receipts(body)
    # One queue, a topic group's, or each partition's row of a partitioned queue: a
    # receipt's lease token tells which of them holds its message (ids are per database).
    queue_ids: dict[str, list[int]] = {}
    for row in partitions.expand(queues_of()):
        queue_ids.setdefault(placement.database_of(row), []).append(row.pk)
    messages = [m for db, ids in queue_ids.items() for m in Message.objects.using(db).filter(
        pk__in=list(receipts), queue_id__in=ids).select_related("queue")]
    for message in messages:  # the receipt whose lease the row carries, if any has it
        leases = receipts[message.pk]
        message.lease_token = (message.lease_token if message.lease_token in leases
                               else min(leases))
    finished = act(messages, body)
    done = [m.pk for m in finished]
    settled = {(m.pk, m.lease_token) for m in finished}
    lost = sorted(pk for pk, leases in receipts.items() for lease in leases
                  if (pk, lease) not in settled)
    if lost:
        error = NotOwner(f"{len(lost)} of the receipts' leases were lost (expired, or taken "
                         "by another delivery), or name no message of this queue; the others "
                         "were done.")
        error.extra = {"done": sorted(done), "lost": lost}  # members of the problem document
        raise error
    return {"done": sorted(done)}


def _ack(messages: list[Message], body: dict[str, Any]) -> list[Message]:
    return ack_many(messages)


def _nack(messages: list[Message], body: dict[str, Any]) -> list[Message]:
    """With an ``error``: a failed delivery (counted; retried after ``delay`` or the
    queue's backoff, or dead-lettered). Without: given back uncounted (after ``delay``)."""
    error = bodies.text(body, "error", longest=MAX_ERROR_CHARS, default=None)
    delay = bodies.number(body, "delay", low=0, high=durations.MAX_DELAY, default=None)
    done = []
    for message in messages:
        if error is None:
            if release([message], delay=delay):
                done.append(message)
            continue
        try:
            fail(message, error, delay=delay)
        except NotOwner:
            continue
        done.append(message)
    return done


def _extend(messages: list[Message], body: dict[str, Any]) -> list[Message]:
    seconds = bodies.number(body, "seconds", low=0, high=durations.MAX_LEASE, low_open=True)
    done = []
    for message in messages:
        try:
            extend(message, seconds)
        except NotOwner:
            continue
        done.append(message)
    return done


def _finisher(act: Callable[[list[Message], dict[str, Any]], list[Message]],
              fields: set[str]) -> Callable[..., Awaitable[HttpResponse]]:
    async def on_queue(request: HttpRequest, queue: str) -> HttpResponse:
        return json_response(await in_database(
            _finish, request, queue, lambda: [get_queue(queue)], fields, act))

    return on_queue


ack_messages = _finisher(_ack, set())
nack_messages = _finisher(_nack, {"error", "delay"})
extend_messages = _finisher(_extend, {"seconds"})


def _group_queues(topic: str, group: str) -> list[Queue]:
    return consumer_groups.group_queues(topic, group)


async def receive_from_group(request: HttpRequest, topic: str, group: str) -> HttpResponse:
    return await _long_poll(request, topic, topic, lambda: _group_queues(topic, group))


def _group_finisher(act: Callable[[list[Message], dict[str, Any]], list[Message]],
                    fields: set[str]) -> Callable[..., Awaitable[HttpResponse]]:
    async def on_group(request: HttpRequest, topic: str, group: str) -> HttpResponse:
        return json_response(await in_database(
            _finish, request, topic, lambda: _group_queues(topic, group), fields, act))

    return on_group


ack_group_messages = _group_finisher(_ack, set())
nack_group_messages = _group_finisher(_nack, {"error", "delay"})
extend_group_messages = _group_finisher(_extend, {"seconds"})
