"""Sending over HTTP: to a queue (one message or a batch, all or none) and publishing
to a topic."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse

from djqueue import durations
from djqueue.api import topics
from djqueue.api.queues import get_queue
from djqueue.api.sending import send, send_batch
from djqueue.conf import get_settings
from djqueue.http import bodies
from djqueue.http.database_threads import in_database
from djqueue.http.endpoint_base import granted, json_response
from djqueue.http.problems import InvalidRequest
from djqueue.models import ApiPermission, Queue
from djqueue.storage import placement

SEND_FIELDS = {"payload", "delay", "priority", "headers", "group_key", "dedup_key", "expires"}
PUBLISH_FIELDS = {"payload", "priority", "headers", "group_key", "expires"}


async def send_messages(request: HttpRequest, queue: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        granted(request, queue, ApiPermission.SEND)
        body = bodies.json_body(request)
        q = get_queue(queue)
        if "messages" not in body:
            bodies.check_fields(body, SEND_FIELDS)
            sent = send(q, _payload(body), **_send_options(body))
            return {"id": sent.pk, "duplicate": sent.duplicate}
        bodies.check_fields(body, {"messages"})
        entries = bodies.listed(body, "messages", longest=get_settings().HTTP_MAX_BATCH)
        return _send_many(q, entries)

    return json_response(await in_database(work), status=201)


def _payload(body: dict[str, Any]) -> Any:
    if "payload" not in body:
        raise InvalidRequest("'payload' is required (any JSON value).")
    return body["payload"]


def _send_options(entry: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {name: entry[name] for name in (
        "delay", "priority", "headers", "group_key", "dedup_key", "expires") if name in entry}
    if "delay" in options:
        options["delay"] = bodies.number(entry, "delay", low=0, high=durations.MAX_DELAY)
    if "expires" in options:
        options["expires"] = _expires(entry)
    return options


def _expires(entry: dict[str, Any]) -> float:
    """An entry's ``expires``: seconds after its message becomes visible
    (djqueue.storage.expiry)."""
    return bodies.number(entry, "expires", low=0, low_open=True,
                         high=durations.MAX_RETENTION)


def _send_many(queue: Queue, entries: list[Any]) -> dict[str, Any]:
    """Every entry, in order, in one transaction: runs of entries with the same delay,
    priority, headers and expiry go in one multi-row insert; an entry with a dedup key alone."""
    ids: list[int] = []
    duplicates: list[int] = []
    with transaction.atomic(using=placement.database_of(queue)):
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
                if sent.duplicate:
                    duplicates.append(sent.pk)
            else:
                run.append(entry)
        ids += _send_run(queue, run)
    return {"ids": ids, "duplicates": duplicates}


def _batch_key(entry: dict[str, Any]) -> str:
    return json.dumps([entry.get("delay"), entry.get("priority", 0), entry.get("headers"),
                       entry.get("expires")], sort_keys=True, default=str)


def _send_run(queue: Queue, run: list[dict[str, Any]]) -> list[int]:
    if not run:
        return []
    options = _send_options(run[0])
    options.pop("group_key", None)
    messages = send_batch(queue, [e["payload"] for e in run],
                          group_keys=[e.get("group_key") for e in run], **options)
    return [m.pk for m in messages]


async def publish_messages(request: HttpRequest, topic: str) -> HttpResponse:
    def work() -> dict[str, Any]:
        granted(request, topic, ApiPermission.SEND)
        body = bodies.json_body(request)
        found = topics.get_topic(topic)
        if "messages" not in body:
            bodies.check_fields(body, PUBLISH_FIELDS)
            entries = [body]
        else:
            bodies.check_fields(body, {"messages"})
            entries = bodies.listed(body, "messages", longest=get_settings().HTTP_MAX_BATCH)
        ids: list[int] = []
        with transaction.atomic(using=topics.topic_database(found)):
            for position, entry in enumerate(entries):
                if not isinstance(entry, dict):
                    raise InvalidRequest(f"messages[{position}] must be an object.")
                bodies.check_fields(entry, PUBLISH_FIELDS, f"messages[{position}]")
                options: dict[str, Any] = {k: entry[k] for k in (
                    "priority", "headers", "group_key") if k in entry}
                if "expires" in entry:
                    options["expires"] = _expires(entry)
                ids.append(topics.publish(found, _payload(entry), **options).pk)
        return {"ids": ids}

    return json_response(await in_database(work), status=201)
