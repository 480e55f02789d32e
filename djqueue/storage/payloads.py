"""Payloads as compact JSON text, the form message bodies are stored in."""

from __future__ import annotations

import json

from djqueue.exceptions import shown_value
from djqueue.storage.fastpath import json_encoder

#: A payload's text: compact, UTF-8 as it is, no NaN.
encode = json_encoder(json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                                    allow_nan=False))
#: ``json.dumps(value)`` with its defaults: what Django writes for a JSONField.
dumps = json_encoder(json.JSONEncoder())


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8: its length when it is ASCII (most payloads), without
    encoding it."""
    return len(text) if text.isascii() else len(text.encode())


def unstorable(text: str) -> str | None:
    """Why no database can store ``text`` as it is, or None: a NUL character (PostgreSQL
    stores none in text or JSON; refused on every database, so a value works the same
    on all), or a lone surrogate (a str Python holds, with no UTF-8 for it)."""
    if "\x00" in text:
        return "contains a NUL character (\\x00), which cannot be stored"
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            return f"is not valid Unicode text: {exc.reason} at position {exc.start}"
    return None


def as_text(value: object) -> str:
    """``str(value)``, or what djqueue's errors show of it where that fails (an int past
    4,300 digits, a ``__str__`` that raises): a failure is recorded whatever it was
    given as its error."""
    try:
        return str(value)
    except Exception:
        return shown_value(value)


def storable(text: str) -> str:
    """``text`` as every database stores it, for text djqueue records rather than refuses
    (a failure's error, a handler's log record): a NUL as ``\\x00`` and a lone surrogate
    as its escape (``\\udcff``), so that one such character does not lose the record."""
    text = text.replace("\x00", "\\x00")
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode()
