"""The HTTP API's OpenAPI 3.1 schema, served at ``openapi.json`` and rendered at
``docs/``. Written out here (not derived from the views) so it is read as the
contract; a test checks it covers every URL and validates real responses against it."""

from __future__ import annotations

from typing import Any

from djqueue.conf import get_settings

JSON = "application/json"
PROBLEM = "application/problem+json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {JSON: {"schema": schema}}}


def _ok(description: str, schema: dict[str, Any], status: str = "200") -> dict[str, Any]:
    return {status: {"description": description, "content": {JSON: {"schema": schema}}}}


#: What a 429 means on most endpoints; sends and receives add their own cases.
QUOTA = "The client's quota is used up (Retry-After says when to try again)"
FULL = "The queue is full, or the client's quota is used up"
CONDITIONS = "The quota is used up, or the client waits with HTTP_MAX_WAIT_CONDITIONS others"


def _problems(*statuses: int, forbidden: bool = True, too_many: str = QUOTA) -> dict[str, Any]:
    """The problem responses: 400, 401 and 429 (every caller has a quota) always, 403
    where a grant is needed."""
    text = {400: "Bad input (the detail names the field)", 401: "No usable token",
            403: "No grant for this", 404: "No such queue, topic or group",
            409: "A receipt's lease was lost", 413: "Payload or body too large",
            415: "The body is not JSON", 429: too_many}
    return {str(s): {"description": text[s], "content": {PROBLEM: {"schema": _ref("Problem")}}}
            for s in sorted({400, 401, 429, *((403,) if forbidden else ()), *statuses})}


def _name(where: str, what: str) -> dict[str, Any]:
    return {"name": where, "in": "path", "required": True, "description": what,
            "schema": {"type": "string", "pattern": r"^[A-Za-z0-9_.:-]{1,100}$"}}


QUEUE = _name("queue", "The queue's name.")
TOPIC = _name("topic", "The topic's name.")
GROUP = _name("group", "The consumer group's name.")


def _finishing(verb: str, fields: dict[str, Any], required: list[str], what: str,
               params: list[dict[str, Any]], tag: str) -> dict[str, Any]:
    return {"post": {
        "operationId": f"{verb}{'Group' if tag == 'topics' else ''}", "tags": [tag],
        "summary": what, "security": [{"token": []}], "parameters": params,
        "requestBody": _body({"type": "object", "additionalProperties": False,
                              "required": ["receipts", *required],
                              "properties": {"receipts": {"type": "array", "minItems": 1,
                                                          "maxItems": 1000,
                                                          "items": {"type": "string"}},
                                             **fields}}),
        "responses": {**_ok("Done for every receipt", _ref("Done")), **_problems(404, 409)}}}


def _pausing(verb: str, what: str) -> dict[str, Any]:
    return {"post": {
        "operationId": verb, "tags": ["queues"], "security": [{"token": []}],
        "summary": what, "parameters": [QUEUE],
        "requestBody": _body({"type": "object", "additionalProperties": False}),
        "responses": {**_ok("Whether it is paused now", {
            "type": "object", "required": ["paused"],
            "properties": {"paused": {"type": "boolean"}}}), **_problems(404)}}}


def openapi() -> dict[str, Any]:
    settings = get_settings()
    batch = settings.HTTP_MAX_BATCH
    nack = {"error": {"type": "string", "maxLength": 8000, "description":
                      "A failed delivery (counted, retried with backoff or dead-lettered); "
                      "without it the message is given back uncounted."},
            "delay": {"type": "number", "minimum": 0,
                      "description": "Seconds before it is visible again."}}
    extend = {"seconds": {"type": "number", "exclusiveMinimum": 0,
                          "description": "The lease's new end, seconds from now."}}
    name_start = {"type": "string", "pattern": r"^[A-Za-z0-9_.:-]{1,100}$"}
    paths: dict[str, Any] = {
        "/queues": {"get": {
            "operationId": "listQueues", "tags": ["queues"], "security": [{"token": []}],
            "summary": "The queues the caller has a grant on, in name order, with their "
                       "depths as last sampled (any grant)",
            "parameters": [
                {"name": "prefix", "in": "query", "schema": name_start,
                 "description": "Only the queues whose names start with it."},
                {"name": "after", "in": "query", "schema": name_start,
                 "description": "Only the queues after it: the previous page's 'next'."},
                {"name": "limit", "in": "query", "schema": {
                    "type": "integer", "minimum": 1, "maximum": 1000, "default": 100}}],
            "responses": {**_ok("A page of queues (an empty one without grants)",
                                _ref("QueueList")), **_problems(forbidden=False)}}},
        "/queues/{queue}": {"get": {
            "operationId": "getQueue", "tags": ["queues"], "security": [{"token": []}],
            "summary": "A queue's attributes and statistics (any grant on it)",
            "parameters": [QUEUE],
            "responses": {**_ok("The queue", _ref("Queue")), **_problems(404)}}},
        "/queues/{queue}/messages": {
            "post": {"operationId": "send", "tags": ["queues"], "security": [{"token": []}],
                     "summary": "Send one message, or a batch (all or none) (SEND)",
                     "parameters": [QUEUE],
                     "requestBody": _body({"oneOf": [_ref("NewMessage"), {
                         "type": "object", "additionalProperties": False,
                         "required": ["messages"], "properties": {"messages": {
                             "type": "array", "minItems": 1, "maxItems": batch,
                             "items": _ref("NewMessage")}}}]}),
                     "responses": {"201": {"description": "Sent", "content": {JSON: {
                         "schema": {"oneOf": [_ref("Sent"), _ref("SentBatch")]}}}},
                         **_problems(404, 413, 415, too_many=FULL)}},
            "get": {"operationId": "peek", "tags": ["queues"], "security": [{"token": []}],
                    "summary": "Messages without claiming them, oldest first (RECEIVE)",
                    "parameters": [QUEUE, {
                        "name": "state", "in": "query", "schema": {"type": "string", "enum": [
                            "ready", "scheduled", "claimed", "dead", "waiting"]}},
                        {"name": "limit", "in": "query", "schema": {
                            "type": "integer", "minimum": 1, "maximum": 10000,
                            "default": 10}}],
                    "responses": {**_ok("Messages", {"type": "object", "required": ["messages"],
                                                     "properties": {"messages": {
                                                         "type": "array",
                                                         "items": _ref("Peeked")}}}),
                                  **_problems(404)}}},
        "/queues/{queue}/receive": {"post": {
            "operationId": "receive", "tags": ["queues"], "security": [{"token": []}],
            "summary": "Claim up to max_messages, waiting up to wait seconds (RECEIVE)",
            "parameters": [QUEUE], "requestBody": _body(_ref("ReceiveRequest"), False),
            "responses": {**_ok("Claimed messages (none if the wait ran out)",
                                _ref("Received")),
                          **_problems(404, 415, too_many=CONDITIONS)}}},
        "/queues/{queue}/ack": _finishing("ack", {}, [], "Finish messages (RECEIVE)",
                                          [QUEUE], "queues"),
        "/queues/{queue}/nack": _finishing("nack", nack, [], "Fail or give back (RECEIVE)",
                                           [QUEUE], "queues"),
        "/queues/{queue}/extend": _finishing("extend", extend, ["seconds"],
                                             "Extend leases (RECEIVE)", [QUEUE], "queues"),
        "/queues/{queue}/redrive": {"post": {
            "operationId": "redrive", "tags": ["queues"], "security": [{"token": []}],
            "summary": "Move dead messages back (FULL_CONTROL; SEND on 'to')",
            "parameters": [QUEUE], "requestBody": _body({
                "type": "object", "additionalProperties": False, "properties": {
                    "to": {"type": "string"}, "limit": {"type": "integer", "minimum": 1},
                    "ids": {"type": "array", "items": {"type": "integer"}}}}),
            "responses": {**_ok("Moved", {"type": "object", "required": ["moved"],
                                          "properties": {"moved": {"type": "integer"}}}),
                          **_problems(404)}}},
        "/queues/{queue}/purge": {"post": {
            "operationId": "purge", "tags": ["queues"], "security": [{"token": []}],
            "summary": "Delete every pending message (FULL_CONTROL)", "parameters": [QUEUE],
            "requestBody": _body({"type": "object", "additionalProperties": False}),
            "responses": {**_ok("Purged", {"type": "object", "required": ["purged"],
                                           "properties": {"purged": {"type": "integer"}}}),
                          **_problems(404)}}},
        "/queues/{queue}/pause": _pausing("pause", "Stop workers claiming from the queue; "
                                                   "sends go on (FULL_CONTROL)"),
        "/queues/{queue}/resume": _pausing("resume", "Let workers claim from the queue "
                                                     "again (FULL_CONTROL)"),
        "/topics/{topic}/messages": {"post": {
            "operationId": "publish", "tags": ["topics"], "security": [{"token": []}],
            "summary": "Publish to every consumer group of a topic (SEND on the topic)",
            "parameters": [TOPIC], "requestBody": _body({"oneOf": [_ref("NewPublication"), {
                "type": "object", "additionalProperties": False, "required": ["messages"],
                "properties": {"messages": {"type": "array", "minItems": 1, "maxItems": batch,
                                            "items": _ref("NewPublication")}}}]}),
            "responses": {"201": {"description": "Published", "content": {JSON: {"schema": {
                "type": "object", "required": ["ids"], "properties": {"ids": {
                    "type": "array", "items": {"type": "integer"}}}}}}},
                **_problems(404, 413, 415, too_many=FULL)}}},
        "/topics/{topic}/groups/{group}/receive": {"post": {
            "operationId": "receiveGroup", "tags": ["topics"], "security": [{"token": []}],
            "summary": "Receive for a consumer group (RECEIVE on the topic)",
            "parameters": [TOPIC, GROUP], "requestBody": _body(_ref("ReceiveRequest"), False),
            "responses": {**_ok("Claimed messages", _ref("Received")),
                          **_problems(404, 415, too_many=CONDITIONS)}}},
        "/topics/{topic}/groups/{group}/ack": _finishing(
            "ack", {}, [], "Finish a group's messages", [TOPIC, GROUP], "topics"),
        "/topics/{topic}/groups/{group}/nack": _finishing(
            "nack", nack, [], "Fail or give back a group's messages", [TOPIC, GROUP], "topics"),
        "/topics/{topic}/groups/{group}/extend": _finishing(
            "extend", extend, ["seconds"], "Extend a group's leases", [TOPIC, GROUP], "topics"),
    }
    nullable_string = {"type": ["string", "null"]}
    unknown_time = {"type": ["string", "null"], "description": "ISO 8601; null when the row "
                    "holds a time no driver reads back (a hand edit)."}
    message_fields = {
        "payload": {"description": "Any JSON value."},
        "priority": {"type": "integer", "minimum": -32768, "maximum": 32767},
        "headers": {"type": "object"},
        "group_key": {"type": "string", "maxLength": 255},
    }
    expires = {"type": "number", "exclusiveMinimum": 0,
               "description": "Seconds after it becomes visible: not delivered by then, "
                              "it is dead-lettered unrun."}
    schemas = {
        "Problem": {"type": "object", "required": ["type", "title", "status", "detail"],
                    "properties": {"type": {"type": "string"}, "title": {"type": "string"},
                                   "status": {"type": "integer"}, "detail": {"type": "string"},
                                   "done": {"type": "array", "items": {"type": "integer"}},
                                   "lost": {"type": "array", "items": {"type": "integer"}}}},
        "NewMessage": {"type": "object", "additionalProperties": False, "required": ["payload"],
                       "properties": {**message_fields,
                                      "delay": {"type": "number", "minimum": 0},
                                      "dedup_key": {"type": "string"},
                                      "expires": expires}},
        "NewPublication": {"type": "object", "additionalProperties": False,
                           "required": ["payload"],
                           "properties": {**message_fields, "expires": expires}},
        "Sent": {"type": "object", "required": ["id", "duplicate"],
                 "properties": {"id": {"type": "integer"}, "duplicate": {"type": "boolean"}}},
        "SentBatch": {"type": "object", "required": ["ids", "duplicates"], "properties": {
            "ids": {"type": "array", "items": {"type": "integer"}},
            "duplicates": {"type": "array", "items": {"type": "integer"}}}},
        "ReceiveRequest": {"type": "object", "additionalProperties": False, "properties": {
            "max_messages": {"type": "integer", "minimum": 1, "maximum": batch, "default": 1},
            "visibility_timeout": {"type": "number", "exclusiveMinimum": 0},
            "wait": {"type": "number", "minimum": 0, "maximum": settings.HTTP_MAX_WAIT,
                     "default": 0},
            "where": {"type": "string", "description": "A condition, e.g. "
                                                       "\"priority >= 5\"."}}},
        "Received": {"type": "object", "required": ["messages"], "properties": {"messages": {
            "type": "array", "items": _ref("Delivery")}}},
        "Delivery": {"type": "object", "required": [
            "id", "receipt", "queue", "payload", "headers", "priority", "attempts", "sent_at",
            "lease_expires_at"], "properties": {
            "id": {"type": "integer"}, "receipt": {"type": "string"},
            "queue": {"type": "string"}, "payload": {}, "headers": {"type": "object"},
            "priority": {"type": "integer"}, "group_key": nullable_string,
            "attempts": {"type": "integer"}, "sent_at": {"type": "string"},
            "lease_expires_at": {"type": "string"}}},
        "Peeked": {"type": "object", "required": ["id", "state", "payload", "attempts"],
                   "properties": {"id": {"type": "integer"}, "state": {"type": "string"},
                                  "payload": {}, "headers": {"type": "object"},
                                  "priority": {"type": "integer"},
                                  "group_key": nullable_string,
                                  "attempts": {"type": "integer"},
                                  "sent_at": unknown_time, "visible_at": unknown_time,
                                  "errors": {"type": "array"}}},
        "Done": {"type": "object", "required": ["done"], "properties": {
            "done": {"type": "array", "items": {"type": "integer"}}}},
        "QueueList": {"type": "object", "required": ["queues", "next"], "properties": {
            "queues": {"type": "array", "items": _ref("QueueDepth")},
            "next": {"type": ["string", "null"], "description":
                     "The 'after' of the next page; null on the last page."}}},
        "QueueDepth": {"type": "object", "required": [
            "name", "paused", "ready", "scheduled", "in_flight", "waiting", "dead",
            "oldest_ready_age", "sample_age"], "properties": {
            "name": {"type": "string"}, "paused": {"type": "boolean"},
            **{state: {"type": ["integer", "null"], "description": f"Messages {what}, as "
                       "the reaper last sampled them (every STATS_INTERVAL); null before "
                       "its first sample."}
               for state, what in (("ready", "ready to be claimed"),
                                   ("scheduled", "delayed or waiting to retry"),
                                   ("in_flight", "claimed"),
                                   ("waiting", "behind their ordered group's head"),
                                   ("dead", "dead-lettered"))},
            "oldest_ready_age": {"type": ["number", "null"], "description":
                                 "Seconds the oldest ready message has waited."},
            "sample_age": {"type": ["number", "null"], "description":
                           "Seconds since the depths were sampled."}}},
        "Queue": {"type": "object", "required": ["name", "paused", "statistics"], "properties": {
            "name": {"type": "string"}, "paused": {"type": "boolean"},
            "visibility_timeout": {"type": "number"}, "max_attempts": {"type": "integer"},
            "dead_letter_queue": nullable_string, "ordered": {"type": "boolean"},
            "retry_jitter": {"type": "number", "minimum": 0, "maximum": 1, "description":
                             "The fraction by which a retry's backoff step is lengthened "
                             "at random."},
            "message_ttl": {"type": ["number", "null"], "description":
                            "Seconds a message may wait once visible before it is "
                            "dead-lettered unrun; null: no limit."},
            "statistics": {"type": "object", "required": ["messages", "pending"], "properties": {
                "messages": {"type": "object",
                             "additionalProperties": {"type": "integer"}},
                "pending": {"type": "integer"},
                "finished": {"type": "integer", "description":
                             "Messages acked or deleted, as the statistics roll-ups have "
                             "counted them (up to STATS_INTERVAL behind)."},
                "oldest_age": {"type": ["number", "null"], "description":
                               "Seconds since the queue's oldest message was sent."}}}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "djqueue HTTP API", "version": "1",
                 "description": "Send, receive and manage djqueue queues over HTTP. "
                                "Authenticate with 'Authorization: Bearer <token>'; errors "
                                "are RFC 9457 problem documents."},
        "tags": [{"name": "queues"}, {"name": "topics"}],
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"token": {
            "type": "http", "scheme": "bearer",
            "description": "An API client's token: djq_<key>_<secret>."}}},
    }
