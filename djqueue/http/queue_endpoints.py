"""Queues over HTTP: the list of those a caller has a grant on, with their sampled
depths; a queue's attributes and statistics, peek, and full control (redrive, purge,
pause and resume)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from django.db.models import Count, Min, QuerySet
from django.http import HttpRequest, HttpResponse

from djqueue.api import peeked_messages, queue_operations
from djqueue.api.queues import get_queue, set_paused
from djqueue.http import access, bodies
from djqueue.http.database_threads import in_database
from djqueue.http.endpoint_base import caller_of, check_name, granted, json_response
from djqueue.http.problems import InvalidRequest
from djqueue.models import ApiPermission, Message, Period, Queue, QueueStat, State
from djqueue.models.names import is_valid_name
from djqueue.models.shown_times import iso_or_null
from djqueue.monitoring import queue_listing
from djqueue.storage import host_clock, placement
from djqueue.storage.queue_lookup import get_queue_by_id
from djqueue.storage.unreadable_rows import values_of

STATE_NAMES = {state.name.lower(): state for state in State}
#: Queues one ``GET queues`` lists at most (its ``limit``).
MAX_LISTED = 1000


async def list_queues(request: HttpRequest) -> HttpResponse:
    """The queues the caller has any grant on, in name order, each with its depth as the
    reaper last sampled it (never a count of the message table): ``prefix``, ``after``
    (the last name of the previous page, which ``next`` gives) and ``limit``."""
    def work() -> dict[str, Any]:
        caller = caller_of(request)
        prefix, after = _query_name(request, "prefix"), _query_name(request, "after")
        limit = bodies.query_whole(request, "limit", low=1, high=MAX_LISTED, default=100)
        rows, more = queue_listing.queue_rows(
            prefix=prefix, after=after, limit=limit,
            visible=lambda name: any(caller.allows(name, p) for p in ApiPermission))
        listed = queue_listing.by_queue(rows)
        return {"queues": listed, "next": listed[-1]["name"] if more else None}

    return json_response(await in_database(work))


def _query_name(request: HttpRequest, name: str) -> str:
    """A query parameter that is a queue's name or the start of one ("" when absent)."""
    value = request.GET.get(name, "")
    if value and not is_valid_name(value):
        raise InvalidRequest(f"Query parameter {name!r} must be 1-100 letters, digits, '_', "
                             "'.', ':' or '-'.")
    return value


async def queue_attributes(request: HttpRequest, queue: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        caller = caller_of(request)
        if not any(caller.allows(queue, p) for p in ApiPermission):
            raise access.Forbidden(f"{caller.name} has no grant on {queue!r}.")
        return _attributes(get_queue(queue, fresh=True))

    return json_response(await in_database(work))


def _attributes(q: Queue) -> dict[str, Any]:
    """The queue's options and statistics, at a cost that does not grow with its history.

    Counts by state: one grouped pass over the claim index, which also gives each
    state's lowest id; the oldest message is the lowest of those (ids rise with send
    time), read by its key. ``finished``: messages acked or deleted, from the queue's
    all-time statistics row (as the metrics' ``djqueue_messages_finished``; the
    reaper's roll-ups count them up to ``STATS_INTERVAL`` behind), where a count of
    its history rows took seconds at ten million rows (docs/admin.md)."""
    db = placement.database_of(q)
    counts = {name: 0 for name in STATE_NAMES}
    firsts = []
    for state, count, first in (Message.objects.using(db).filter(queue=q).values_list("state")
                                .annotate(n=Count("id"), first=Min("id")).order_by()):
        counts[State(state).name.lower()] = count
        firsts.append(first)
    oldest = (_time_of(Message.objects.using(db).filter(pk=min(firsts)), "sent_at")
              if firsts else None)
    # Read here alone: the queue's lookup leaves it out (lookup_statements.QUEUE_COLUMNS).
    created_at = _time_of(Queue.objects.using(db).filter(pk=q.pk), "created_at")
    finished = QueueStat.objects.using(db).filter(queue=q, period=Period.TOTAL).values_list(
        "acked", "deleted").first()
    return {
        "name": q.name, "created_at": iso_or_null(created_at), "paused": q.paused,
        "visibility_timeout": q.visibility_timeout, "max_attempts": q.max_attempts,
        "backoff": q.backoff, "retry_jitter": q.retry_jitter,
        "dead_letter_queue": (get_queue_by_id(q.dead_letter_queue_id, db).name
                              if q.dead_letter_queue_id is not None else None),
        "retention": q.retention, "message_ttl": q.message_ttl, "max_depth": q.max_depth,
        "max_payload_bytes": q.max_payload_bytes, "ordered": q.ordered,
        "dedup_window": q.dedup_window, "exactly_once": q.exactly_once,
        "rate_limit": q.rate_limit or None, "concurrency_limit": q.concurrency_limit,
        "statistics": {"messages": counts, "pending": sum(counts.values()) - counts["dead"],
                       "oldest_age": None if oldest is None else
                       round((host_clock.database_now(db) - oldest).total_seconds(), 3),
                       "finished": sum(finished) if finished else 0},
    }


def _time_of(row: QuerySet[Any], column: str) -> datetime | None:
    """``column`` of the one row of ``row``; None if there is none, or if a hand edit
    left it unreadable (djqueue.storage.unreadable_rows)."""
    found = values_of(row, [column])
    return found[0][0] if found else None


async def peek_messages(request: HttpRequest, queue: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        granted(request, queue, ApiPermission.RECEIVE)
        state_name = request.GET.get("state")
        if state_name is not None and state_name not in STATE_NAMES:
            raise InvalidRequest(f"'state' is one of {', '.join(STATE_NAMES)}.")
        limit = bodies.query_whole(request, "limit", low=1, high=queue_operations.MAX_PEEK,
                                   default=10)
        found = queue_operations.peek(
            queue, state=None if state_name is None else STATE_NAMES[state_name], limit=limit)
        return {"messages": [peeked_messages.as_json(m) for m in found]}

    return json_response(await in_database(work))


async def redrive_messages(request: HttpRequest, queue: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        caller = granted(request, queue, ApiPermission.FULL_CONTROL)
        body = bodies.json_body(request)
        bodies.check_fields(body, {"to", "limit", "ids"})
        to = bodies.text(body, "to", longest=100, default=None)
        if to is not None:
            check_name(to, "queue")
            caller.require(to, ApiPermission.SEND)
        limit = bodies.whole(body, "limit", low=1, high=10**9, default=None)
        ids = body.get("ids")
        if ids is not None and not isinstance(ids, list):
            raise InvalidRequest("'ids' must be a list of message ids.")
        return {"moved": queue_operations.redrive(queue, to, limit=limit, ids=ids)}

    return json_response(await in_database(work))


async def purge_queue(request: HttpRequest, queue: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        granted(request, queue, ApiPermission.FULL_CONTROL)
        bodies.check_fields(bodies.json_body(request), set())
        return {"purged": queue_operations.purge(queue)}

    return json_response(await in_database(work))


def pausing(paused: bool) -> Callable[[HttpRequest, str], Awaitable[HttpResponse]]:
    """The endpoint that pauses (or resumes) a queue: workers stop (or go on) claiming
    from it; sends go on either way."""

    async def pause_or_resume(request: HttpRequest, queue: str) -> HttpResponse:
        def work() -> dict[str, Any]:
            granted(request, queue, ApiPermission.FULL_CONTROL)
            bodies.check_fields(bodies.json_body(request), set())
            return {"paused": set_paused(queue, paused).paused}

        return json_response(await in_database(work))

    return pause_or_resume
