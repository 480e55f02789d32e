"""JSON text: the standard library's C encoder, built once instead of on every call."""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _json_encoder
from typing import Any

from djqueue.storage.fastpath import verified


def unsupported(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_encoder(plain: json.JSONEncoder) -> Callable[[Any], str]:
    """``plain.encode``, with its C encoder built once.

    Why: ``JSONEncoder.encode`` builds its C encoder (``c_make_encoder``) anew on
    every call, two thirds of the time a ~100-byte payload takes, and
    ``send_batch`` encodes a thousand per call. It is built without the
    circular-reference bookkeeping (a dict shared by every caller could not tell
    two threads encoding one payload from a cycle): a value that contains itself
    raises RecursionError instead of ValueError. Plain path: ``plain.encode``."""
    make_encoder = getattr(_json_encoder, "c_make_encoder", None)
    if not verified.enabled or make_encoder is None or plain.indent is not None:
        return plain.encode
    escape = (_json_encoder.encode_basestring_ascii if plain.ensure_ascii
              else _json_encoder.encode_basestring)
    encode_chunks = make_encoder(None, unsupported, escape, None, plain.key_separator,
                                 plain.item_separator, plain.sort_keys, plain.skipkeys,
                                 plain.allow_nan)

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return plain.encode(value)
        return "".join(encode_chunks(value, 0))

    return encode


