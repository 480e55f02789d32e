"""What a message must be before it is sent: its payload encodes as JSON within the
queue's limit, its headers, priority and group key have the right type and range,
and no key or header holds a character a database cannot store."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from djqueue.exceptions import InvalidMessage, shown_value
from djqueue.storage.payloads import encode as _encode
from djqueue.storage.payloads import unstorable

SMALLINT = (-32768, 32767)
MAX_GROUP_KEY_CHARS = 200


def validate_group_key(group_key: Any) -> None:
    if group_key is not None and (not isinstance(group_key, str) or not group_key
                                  or len(group_key) > MAX_GROUP_KEY_CHARS):
        raise InvalidMessage(f"group_key must be a non-empty string of at most "
                             f"{MAX_GROUP_KEY_CHARS} characters, got {shown_value(group_key)}.")
    if group_key is not None:
        check_storable(group_key, "group_key")


def check_storable(text: str, what: str) -> None:
    """Refuse text no database stores as it is (djqueue.storage.payloads.unstorable)."""
    why = unstorable(text)
    if why is not None:
        raise InvalidMessage(f"{what} {why}.")


def validate_priority(priority: Any) -> None:
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
            SMALLINT[0] <= priority <= SMALLINT[1]):
        raise InvalidMessage(f"priority must be an integer from {SMALLINT[0]} to {SMALLINT[1]},"
                             f" got {shown_value(priority)}.")


def check_payloads(payloads: object) -> None:
    """Refuse a string (one message per character), a dict or a non-iterable."""
    if isinstance(payloads, str | bytes | bytearray | dict) or not isinstance(payloads, Iterable):
        raise InvalidMessage(f"A batch takes an iterable of payloads (a list, say), not "
                             f"{type(payloads).__name__}.")


def encode_payload(payload: Any) -> str:
    try:
        body = _encode(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"Payload is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidMessage("Payload is not JSON-serialisable: it contains itself "
                             "(or is nested too deeply).") from None
    check_storable(body, "Payload")  # JSON writes a NUL as an escape
    return body


#: A NUL as JSON text writes it: \u0000 after an even number of backslashes (an odd
#: number would make it the text "\u0000", which is fine).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def holds_json_nul(text: str) -> bool:
    """Whether JSON ``text`` holds a NUL character, which a JSON column cannot store
    (PostgreSQL's jsonb reads none): headers, and a task's arguments and value, which
    its record keeps. A payload's text column stores one."""
    return "\\u0000" in text and _JSON_NUL.search(text) is not None


def json_unstorable(text: str) -> str | None:
    """Why a JSON column cannot store JSON ``text`` (as ``encode`` writes it, a lone
    surrogate as it is), or None: :func:`unstorable`, or a NUL written as its escape."""
    if holds_json_nul(text):
        return "contains a NUL character (\\x00), which cannot be stored"
    return unstorable(text)


def check_headers(headers: Any) -> dict[str, Any] | None:
    if headers is None:
        return None
    if not isinstance(headers, dict) or not all(isinstance(k, str) for k in headers):
        raise InvalidMessage("headers must be a dict with string keys.")
    try:
        text = json.dumps(headers, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"headers are not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidMessage("headers contain themselves (or are nested too deeply).") from None
    why = json_unstorable(text)
    if why is not None:
        raise InvalidMessage(f"headers {why}.")
    return headers
