"""Payloads as compact JSON text, the form message bodies are stored in."""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _json_encoder
from typing import Any


def _unsupported(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _compiled(plain: json.JSONEncoder) -> Callable[[Any], str]:
    """``plain.encode``, with its C encoder built once.

    Why: ``JSONEncoder.encode`` builds its C encoder anew on every call, two
    thirds of the time a ~100-byte payload takes (1.2 vs 0.4 µs), and
    ``send_batch`` encodes a thousand of them per call. The C encoder is built
    without the circular-reference bookkeeping (a dict shared by all callers
    could not tell two threads encoding one payload from a cycle); a value that
    contains itself raises RecursionError instead of ValueError. Where the C
    accelerator is missing, the plain encoder is used.
    """
    make_encoder = getattr(_json_encoder, "c_make_encoder", None)
    if make_encoder is None or plain.indent is not None:
        return plain.encode
    escape = (_json_encoder.encode_basestring_ascii if plain.ensure_ascii
              else _json_encoder.encode_basestring)
    encode_chunks = make_encoder(None, _unsupported, escape, None, plain.key_separator,
                                 plain.item_separator, plain.sort_keys, plain.skipkeys,
                                 plain.allow_nan)

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return plain.encode(value)
        return "".join(encode_chunks(value, 0))

    return encode


#: A payload's text: compact, UTF-8 as it is, no NaN.
encode = _compiled(json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                                    allow_nan=False))
#: ``json.dumps(value)`` with its defaults: what Django writes for a JSONField.
dumps = _compiled(json.JSONEncoder())
