"""Payloads as compact JSON text, the form message bodies are stored in."""

from __future__ import annotations

import json

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
