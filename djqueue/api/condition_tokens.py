"""The tokenizer of the condition language (see djqueue.api.condition_parser for the grammar)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from djqueue.exceptions import InvalidCondition

MAX_INT = 2**63 - 1

KEYWORDS = {"and", "or", "xor", "not", "div", "mod", "true", "false"}

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)
  | (?P<op>&&|\|\||<<|>>|<=|>=|<>|!=|[=<>+\-*/%&|^~!()])
""", re.VERBOSE)


@dataclass(frozen=True)
class Token:
    kind: str  # number, string, name, op, end
    text: str
    pos: int  # 1-based character position
    value: Any = None


def tokenize(source: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(source):
        ch = source[i]
        if ch in "'\"":
            value, end = _read_string(source, i)
            tokens.append(Token("string", source[i:end], i + 1, value))
            i = end
            continue
        match = _TOKEN.match(source, i)
        if match is None:
            raise InvalidCondition(f"Unexpected character {ch!r}", i + 1, source)
        kind = match.lastgroup
        text = match.group()
        if kind == "number":
            tokens.append(Token("number", text, i + 1, _number(text, i + 1, source)))
        elif kind == "name":
            if source[match.end():match.end() + 1] == ".":
                raise InvalidCondition("A name has at most one dot (headers.NAME)",
                                       match.end() + 1, source)
            lower = text.lower()
            tokens.append(Token("op" if lower in KEYWORDS else "name",
                                lower if lower in KEYWORDS else text, i + 1))
        elif kind == "op":
            tokens.append(Token("op", text, i + 1))
        i = match.end()
    tokens.append(Token("end", "", len(source) + 1))
    return tokens


def _read_string(source: str, start: int) -> tuple[str, int]:
    quote = source[start]
    out: list[str] = []
    i = start + 1
    while i < len(source):
        ch = source[i]
        if ch == "\\" and i + 1 < len(source):
            out.append({"n": "\n", "t": "\t", "0": "\0"}.get(source[i + 1], source[i + 1]))
            i += 2
        elif ch == quote:
            if source[i + 1:i + 2] == quote:
                out.append(quote)
                i += 2
            else:
                return "".join(out), i + 1
        else:
            out.append(ch)
            i += 1
    raise InvalidCondition("Unterminated string", start + 1, source)


def _number(text: str, pos: int, source: str) -> int | float:
    if re.fullmatch(r"\d+", text):
        value = int(text)
        if value > MAX_INT:
            raise InvalidCondition(f"Integer {text} is out of range (at most 2**63-1)", pos,
                                   source)
        return value
    number = float(text)
    if not math.isfinite(number):
        raise InvalidCondition(f"Number {text} is out of range", pos, source)
    return number
