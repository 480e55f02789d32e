"""The HTTP API's endpoints: each checks its caller's grant, then calls the queue's
Python API (djqueue.api) on a database thread. The paths are in djqueue.http.urls,
and each endpoint's request and response in djqueue.http.schema.

A message received over HTTP carries a ``receipt`` (its id and lease token); ack,
nack and extend take receipts, so only the receiver of a delivery can finish it,
and a receipt whose lease was lost gets 409 (with what was done for the others).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from djqueue import durations
from djqueue.api import consumer_groups, queue_operations, topics
from djqueue.api.queues import get_queue
from djqueue.api.receiving import MAX_OWNER_CHARS, receive
from djqueue.api.sending import send, send_batch
from djqueue.conf import get_settings
from djqueue.exceptions import NotOwner
from djqueue.http import access, bodies, long_polls, problems
from djqueue.http.database_threads import in_database
from djqueue.http.problems import InvalidRequest
from djqueue.models import ApiPermission, History, Message, Queue, State
from djqueue.models.queue import QUEUE_NAME_RE
from djqueue.storage import dialects
from djqueue.storage.transitions import MAX_ERROR_CHARS, ack_many, extend, fail, release

logger = logging.getLogger("djqueue.http")
RECEIPT_RE = re.compile(r"^([1-9][0-9]{0,18})\.([0-9a-f]{32})$")
#: Receipts one ack, nack or extend takes.
MAX_RECEIPTS = 1000
SEND_FIELDS = {"payload", "delay", "priority", "headers", "group_key", "dedup_key"}
PUBLISH_FIELDS = {"payload", "priority", "headers", "group_key"}
STATE_NAMES = {state.name.lower(): state for state in State}


# The frame every endpoint runs in

Handler = Callable[..., Awaitable[HttpResponse]]


def endpoint(**methods: Handler) -> Callable[..., Awaitable[HttpResponse]]:
    """A view answering ``methods`` (GET=..., POST=...), each an async function of the
    request and the path's parameters; exceptions become problem documents."""

    async def view(request: HttpRequest, **params: str) -> HttpResponse:
        handler = methods.get(request.method or "")
        if handler is None:
            response = problems.problem(405, "MethodNotAllowed", "Method not allowed",
                                        f"This endpoint takes {', '.join(methods)}.")
            response["Allow"] = ", ".join(methods)
            return response
        try:
            for name, value in params.items():
                _check_name(value, name)
            return await handler(request, **params)
        except Exception as exc:  # every known error is a problem document, the rest 500
            response = problems.from_exception(exc, **getattr(exc, "extra", {}))
            if response is None:
                logger.exception("HTTP API error on %s %s", request.method, request.path)
                return problems.problem(500, "InternalError", "Internal error",
                                        "The server failed; the error is in its log.")
            return response

    # Unsafe methods take bearer tokens only (djqueue.http.access): no cookie, no CSRF.
    return csrf_exempt(view)


def _check_name(value: str, what: str) -> None:
    if not QUEUE_NAME_RE.match(value):
        raise InvalidRequest(f"{value[:120]!r} is not a valid {what} name: 1-100 letters, "
                             "digits, '_', '.', ':' or '-'.")


def _caller(request: HttpRequest) -> access.Caller:
    """Runs on a database thread (the token's row is read). A signed-in user counts for
    GET alone (djqueue.http.access); served by djqueue.http.asgi, a request has no
    middleware, so its session is read here."""
    authorization = request.META.get("HTTP_AUTHORIZATION", "")
    user = None
    if not authorization and request.method in ("GET", "HEAD"):
        user = getattr(request, "user", None) or access.session_user(request)
    return access.authenticate(authorization, user)


def _granted(request: HttpRequest, name: str, needed: ApiPermission) -> access.Caller:
    """The request's caller, if it may do ``needed`` on ``name`` (else 401 or 403)."""
    caller = _caller(request)
    caller.require(name, needed)
    return caller


def _json(data: Any, status: int = 200) -> JsonResponse:
    return JsonResponse(data, status=status, json_dumps_params={"separators": (",", ":")})


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


# Queues: send, receive, finish

async def send_messages(request: HttpRequest, queue: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        _granted(request, queue, ApiPermission.SEND)
        body = bodies.json_body(request)
        q = get_queue(queue)
        if "messages" not in body:
            bodies.check_fields(body, SEND_FIELDS)
            sent = send(q, _payload(body), **_send_options(body))
            return {"id": sent.pk, "duplicate": bool(getattr(sent, "duplicate", False))}
        bodies.check_fields(body, {"messages"})
        entries = bodies.listed(body, "messages", longest=get_settings().HTTP_MAX_BATCH)
        return _send_many(q, entries)

    return _json(await in_database(work), status=201)


def _payload(body: dict[str, Any]) -> Any:
    if "payload" not in body:
        raise InvalidRequest("'payload' is required (any JSON value).")
    return body["payload"]


def _send_options(entry: dict[str, Any]) -> dict[str, Any]:
    options = {name: entry[name] for name in ("delay", "priority", "headers", "group_key",
                                              "dedup_key") if name in entry}
    if "delay" in options:
        options["delay"] = bodies.number(entry, "delay", low=0, high=durations.MAX_DELAY)
    return options


def _send_many(queue: Queue, entries: list[Any]) -> dict[str, Any]:
    """Every entry, in order, in one transaction: runs of entries with the same delay,
    priority and headers go in one multi-row insert; an entry with a dedup key alone."""
    ids: list[int] = []
    duplicates: list[int] = []
    with transaction.atomic(using=dialects.alias()):
        run: list[dict[str, Any]] = []
        for position, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise InvalidRequest(f"messages[{position}] must be an object.")
            bodies.check_fields(entry, SEND_FIELDS, f"messages[{position}]")
            _payload(entry)
            if (run and _batch_key(run[0]) != _batch_key(entry)) or "dedup_key" in entry:
                ids += _send_run(queue, run)
                run = []
            if "dedup_key" in entry:
                sent = send(queue, entry["payload"], **_send_options(entry))
                ids.append(sent.pk)
                if getattr(sent, "duplicate", False):
                    duplicates.append(sent.pk)
            else:
                run.append(entry)
        ids += _send_run(queue, run)
    return {"ids": ids, "duplicates": duplicates}


def _batch_key(entry: dict[str, Any]) -> str:
    return json.dumps([entry.get("delay"), entry.get("priority", 0), entry.get("headers")],
                      sort_keys=True, default=str)


def _send_run(queue: Queue, run: list[dict[str, Any]]) -> list[int]:
    if not run:
        return []
    options = _send_options(run[0])
    options.pop("group_key", None)
    messages = send_batch(queue, [e["payload"] for e in run],
                          group_keys=[e.get("group_key") for e in run], **options)
    return [m.pk for m in messages]


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
    def first() -> tuple[ReceiveRequest, list[Queue]]:
        caller = _granted(request, permission_on, ApiPermission.RECEIVE)
        return _receive_request(request, caller), queues_of()

    wanted, queues = await in_database(first)
    names = tuple(q.name for q in queues)

    def claim() -> list[dict[str, Any]]:
        return [_delivered(m) for m in receive(
            list(names), max_messages=wanted.max_messages,
            visibility_timeout=wanted.visibility_timeout, owner=wanted.owner,
            where=wanted.where)]

    messages = await long_polls.room().receive(
        names, wanted.wait, lambda: in_database(claim), wanted.max_messages)
    return _json({"messages": messages})


def _delivered(message: Message) -> dict[str, Any]:
    return {"id": message.pk, "receipt": f"{message.pk}.{message.lease_token}",
            "queue": message.queue.name, "payload": message.payload,
            "headers": message.headers or {}, "priority": message.priority,
            "group_key": message.group_key, "attempts": message.attempts,
            "sent_at": _iso(message.sent_at), "lease_expires_at": _iso(message.visible_at)}


async def receive_messages(request: HttpRequest, queue: str) -> HttpResponse:
    return await _long_poll(request, queue, queue, lambda: [get_queue(queue)])


def _receipts(body: dict[str, Any]) -> dict[int, str]:
    receipts = bodies.listed(body, "receipts", longest=MAX_RECEIPTS)
    found: dict[int, str] = {}
    for receipt in receipts:
        match = RECEIPT_RE.match(receipt) if isinstance(receipt, str) else None
        if not match:
            raise InvalidRequest(f"{str(receipt)[:80]!r} is not a receipt (as a receive "
                                 "returned it: '<id>.<lease>').")
        found[int(match.group(1))] = match.group(2)
    return found


def _finish(request: HttpRequest, permission_on: str, queues_of: Callable[[], list[Queue]],
            fields: set[str], act: Callable[[list[Message], dict[str, Any]], list[int]],
            ) -> dict[str, Any]:
    """Ack, nack or extend: the messages the receipts name, in ``queues_of()``, each with
    the receipt's lease (only its holder's lease matches the row's)."""
    _granted(request, permission_on, ApiPermission.RECEIVE)
    body = bodies.json_body(request)
    bodies.check_fields(body, {"receipts", *fields})
    receipts = _receipts(body)
    queue_ids = [q.pk for q in queues_of()]
    messages = list(Message.objects.using(dialects.alias()).filter(
        pk__in=list(receipts), queue_id__in=queue_ids).select_related("queue"))
    for message in messages:
        message.lease_token = receipts[message.pk]
    done = act(messages, body)
    lost = sorted(set(receipts) - set(done))
    if lost:
        error = NotOwner(f"{len(lost)} of the receipts' leases were lost (expired, or taken "
                         "by another delivery), or name no message of this queue; the others "
                         "were done.")
        error.extra = {"done": sorted(done), "lost": lost}  # members of the problem document
        raise error
    return {"done": sorted(done)}


def _ack(messages: list[Message], body: dict[str, Any]) -> list[int]:
    return [m.pk for m in ack_many(messages)]


def _nack(messages: list[Message], body: dict[str, Any]) -> list[int]:
    """With an ``error``: a failed delivery (counted; retried after ``delay`` or the
    queue's backoff, or dead-lettered). Without: given back uncounted (after ``delay``)."""
    error = bodies.text(body, "error", longest=MAX_ERROR_CHARS, default=None)
    delay = bodies.number(body, "delay", low=0, high=durations.MAX_DELAY, default=None)
    done = []
    for message in messages:
        if error is None:
            if release([message], delay=delay):
                done.append(message.pk)
            continue
        try:
            fail(message, error, delay=delay)
        except NotOwner:
            continue
        done.append(message.pk)
    return done


def _extend(messages: list[Message], body: dict[str, Any]) -> list[int]:
    seconds = bodies.number(body, "seconds", low=0, high=durations.MAX_LEASE, low_open=True)
    done = []
    for message in messages:
        try:
            extend(message, seconds)
        except NotOwner:
            continue
        done.append(message.pk)
    return done


def _finisher(act: Callable[[list[Message], dict[str, Any]], list[int]],
              fields: set[str]) -> Callable[..., Awaitable[HttpResponse]]:
    async def on_queue(request: HttpRequest, queue: str) -> HttpResponse:
        return _json(await in_database(
            _finish, request, queue, lambda: [get_queue(queue)], fields, act))

    return on_queue


ack_messages = _finisher(_ack, set())
nack_messages = _finisher(_nack, {"error", "delay"})
extend_messages = _finisher(_extend, {"seconds"})


# Queues: reading and full control

async def queue_attributes(request: HttpRequest, queue: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        caller = _caller(request)
        if not any(caller.allows(queue, p) for p in ApiPermission):
            raise access.Forbidden(f"{caller.name} has no grant on {queue!r}.")
        return _attributes(get_queue(queue, fresh=True))

    return _json(await in_database(work))


def _attributes(q: Queue) -> dict[str, Any]:
    from django.db.models import Count, Min

    db = dialects.alias()
    counts = {name: 0 for name in STATE_NAMES}
    for state, count in (Message.objects.using(db).filter(queue=q).values_list("state")
                         .annotate(n=Count("id")).order_by()):
        counts[State(state).name.lower()] = count
    oldest = Message.objects.using(db).filter(queue=q).aggregate(m=Min("sent_at"))["m"]
    return {
        "name": q.name, "created_at": _iso(q.created_at), "paused": q.paused,
        "visibility_timeout": q.visibility_timeout, "max_attempts": q.max_attempts,
        "backoff": q.backoff,
        "dead_letter_queue": q.dead_letter_queue.name if q.dead_letter_queue_id else None,
        "retention": q.retention, "max_depth": q.max_depth,
        "max_payload_bytes": q.max_payload_bytes, "ordered": q.ordered,
        "dedup_window": q.dedup_window, "exactly_once": q.exactly_once,
        "rate_limit": q.rate_limit or None, "concurrency_limit": q.concurrency_limit,
        "statistics": {"messages": counts, "pending": sum(counts.values()) - counts["dead"],
                       "oldest_age": None if oldest is None else
                       round((timezone.now() - oldest).total_seconds(), 3),
                       "finished": History.objects.using(db).filter(queue=q).count()},
    }


async def peek_messages(request: HttpRequest, queue: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        _granted(request, queue, ApiPermission.RECEIVE)
        state_name = request.GET.get("state")
        if state_name is not None and state_name not in STATE_NAMES:
            raise InvalidRequest(f"'state' is one of {', '.join(STATE_NAMES)}.")
        limit = bodies.query_whole(request, "limit", low=1, high=queue_operations.MAX_PEEK,
                                   default=10)
        found = queue_operations.peek(
            queue, state=None if state_name is None else STATE_NAMES[state_name], limit=limit)
        return {"messages": [{
            "id": m.pk, "state": State(m.state).name.lower(), "payload": m.payload,
            "headers": m.headers or {}, "priority": m.priority, "group_key": m.group_key,
            "attempts": m.attempts, "sent_at": _iso(m.sent_at),
            "visible_at": _iso(m.visible_at), "errors": m.errors or []} for m in found]}

    return _json(await in_database(work))


async def redrive_messages(request: HttpRequest, queue: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        caller = _granted(request, queue, ApiPermission.FULL_CONTROL)
        body = bodies.json_body(request)
        bodies.check_fields(body, {"to", "limit", "ids"})
        to = bodies.text(body, "to", longest=100, default=None)
        if to is not None:
            _check_name(to, "queue")
            caller.require(to, ApiPermission.SEND)
        limit = bodies.whole(body, "limit", low=1, high=10**9, default=None)
        ids = body.get("ids")
        if ids is not None and not isinstance(ids, list):
            raise InvalidRequest("'ids' must be a list of message ids.")
        return {"moved": queue_operations.redrive(queue, to, limit=limit, ids=ids)}

    return _json(await in_database(work))


async def purge_queue(request: HttpRequest, queue: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        _granted(request, queue, ApiPermission.FULL_CONTROL)
        bodies.check_fields(bodies.json_body(request), set())
        return {"purged": queue_operations.purge(queue)}

    return _json(await in_database(work))


# Topics

async def publish_messages(request: HttpRequest, topic: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        _granted(request, topic, ApiPermission.SEND)
        body = bodies.json_body(request)
        found = topics.get_topic(topic)
        if "messages" not in body:
            bodies.check_fields(body, PUBLISH_FIELDS)
            entries = [body]
        else:
            bodies.check_fields(body, {"messages"})
            entries = bodies.listed(body, "messages", longest=get_settings().HTTP_MAX_BATCH)
        ids: list[int] = []
        with transaction.atomic(using=dialects.alias()):
            for position, entry in enumerate(entries):
                if not isinstance(entry, dict):
                    raise InvalidRequest(f"messages[{position}] must be an object.")
                bodies.check_fields(entry, PUBLISH_FIELDS, f"messages[{position}]")
                options = {k: entry[k] for k in ("priority", "headers", "group_key")
                           if k in entry}
                ids.append(topics.publish(found, _payload(entry), **options).pk)
        return {"ids": ids}

    return _json(await in_database(work), status=201)


def _group_queues(topic: str, group: str) -> list[Queue]:
    return consumer_groups.group_queues(topic, group)


async def receive_from_group(request: HttpRequest, topic: str, group: str) -> HttpResponse:
    return await _long_poll(request, topic, topic, lambda: _group_queues(topic, group))


def _group_finisher(act: Callable[[list[Message], dict[str, Any]], list[int]],
                    fields: set[str]) -> Callable[..., Awaitable[HttpResponse]]:
    async def on_group(request: HttpRequest, topic: str, group: str) -> HttpResponse:
        return _json(await in_database(
            _finish, request, topic, lambda: _group_queues(topic, group), fields, act))

    return on_group


ack_group_messages = _group_finisher(_ack, set())
nack_group_messages = _group_finisher(_nack, {"error", "delay"})
extend_group_messages = _group_finisher(_extend, {"seconds"})


def views() -> dict[str, Any]:
    """The endpoint views by URL name (djqueue.http.urls)."""
    return {
        "queue": endpoint(GET=queue_attributes),
        "messages": endpoint(POST=send_messages, GET=peek_messages),
        "receive": endpoint(POST=receive_messages),
        "ack": endpoint(POST=ack_messages),
        "nack": endpoint(POST=nack_messages),
        "extend": endpoint(POST=extend_messages),
        "redrive": endpoint(POST=redrive_messages),
        "purge": endpoint(POST=purge_queue),
        "publish": endpoint(POST=publish_messages),
        "group-receive": endpoint(POST=receive_from_group),
        "group-ack": endpoint(POST=ack_group_messages),
        "group-nack": endpoint(POST=nack_group_messages),
        "group-extend": endpoint(POST=extend_group_messages),
    }

