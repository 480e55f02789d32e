"""Request bodies and query parameters: read within the size limit, parsed as JSON, and
each field checked for its type and range, with errors that name the field."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest

from djqueue.conf import get_settings
from djqueue.http.problems import InvalidRequest, RequestTooLarge, UnsupportedMediaType

_MISSING = object()


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request's JSON object. 413 past HTTP_MAX_BODY_BYTES (by its Content-Length,
    before anything is parsed), 415 if it is not JSON, 400 if it is not an object."""
    limit = get_settings().HTTP_MAX_BODY_BYTES
    declared = request.META.get("CONTENT_LENGTH") or ""
    if _digits(declared) and int(declared) > limit:
        raise RequestTooLarge(f"The body has {int(declared)} bytes; the limit is {limit}.")
    kind = (request.content_type or "").lower()
    if kind != "application/json":
        raise UnsupportedMediaType("Send the body as 'Content-Type: application/json'.")
    # read(), not .body: the limit here is the API's, not DATA_UPLOAD_MAX_MEMORY_SIZE.
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise RequestTooLarge(f"The body has more than {limit} bytes.")
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidRequest(f"The body is not JSON: {str(exc)[:200]}") from None
    if not isinstance(value, dict):
        raise InvalidRequest("The body must be a JSON object.")
    return value


def _digits(text: str) -> bool:
    """Whether ``text`` is a whole number ``int`` reads at once: ASCII digits only
    (``"²".isdigit()`` is true, and ``int("²")`` fails), and at most 18 of them (past
    4,300 ``int`` refuses, and no bound here is near 10**18)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def check_fields(body: dict[str, Any], allowed: set[str], what: str = "The body") -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidRequest(f"{what} has unknown field(s): {', '.join(map(repr, unknown))[:300]}; "
                             f"it takes {', '.join(sorted(allowed))}.")


def number(body: dict[str, Any], name: str, *, low: float, high: float,
           default: Any = _MISSING, low_open: bool = False) -> Any:
    value = body.get(name, default)
    if value is _MISSING:
        raise InvalidRequest(f"{name!r} is required.")
    if value is default and name not in body:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or not (
            (low < value if low_open else low <= value) and value <= high):
        bound = f"above {low:g}" if low_open else f"from {low:g}"
        raise InvalidRequest(f"{name!r} must be a number {bound} to {high:g}, got "
                             f"{str(value)[:100]!r}.")
    return value


def whole(body: dict[str, Any], name: str, *, low: int, high: int,
          default: Any = _MISSING) -> Any:
    value = body.get(name, default)
    if value is _MISSING:
        raise InvalidRequest(f"{name!r} is required.")
    if value is default and name not in body:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(f"{name!r} must be a whole number from {low} to {high}, got "
                             f"{str(value)[:100]!r}.")
    return value


def text(body: dict[str, Any], name: str, *, longest: int, default: Any = _MISSING) -> Any:
    value = body.get(name, default)
    if value is _MISSING:
        raise InvalidRequest(f"{name!r} is required.")
    if value is default and name not in body:
        return value
    if not isinstance(value, str) or len(value) > longest:
        raise InvalidRequest(f"{name!r} must be a string of at most {longest} characters.")
    return value


def listed(body: dict[str, Any], name: str, *, longest: int) -> list[Any]:
    value = body.get(name, _MISSING)
    if value is _MISSING:
        raise InvalidRequest(f"{name!r} is required.")
    if not isinstance(value, list) or not 1 <= len(value) <= longest:
        raise InvalidRequest(f"{name!r} must be a list of 1 to {longest} items.")
    return value


def query_whole(request: HttpRequest, name: str, *, low: int, high: int, default: int) -> int:
    raw = request.GET.get(name)
    if raw is None:
        return default
    if not _digits(raw) or not low <= int(raw) <= high:
        raise InvalidRequest(f"Query parameter {name!r} must be a whole number from {low} to "
                             f"{high}.")
    return int(raw)
