"""Conditional receive: a small expression language compiled to ORM filters.

Q4M's ``queue_wait('t:v1>=5')`` lets a consumer take only messages matching a
condition. Here a condition is written over message fields and header values
with MySQL's operators and precedence::

    priority >= 5 and headers.region = 'eu'
    attempts < 3 xor (id mod 2 = 0)
    headers.size div 1024 > 10 || not group_key = 'bulk'

Names: ``id``, ``priority``, ``attempts`` (numbers), ``group_key`` (text),
``headers.NAME`` (a header value; a number where compared with or computed
as a number, text where compared with text; a header that is missing or of
the other type is NULL, so the comparison is false).

Operators, loosest first: ``or ||``, ``xor``, ``and &&``, ``not``, comparisons
``= != <> < <= > >=`` (not chained), ``|``, ``&``, ``<< >>``, ``+ -``,
``* / div % mod``, ``^`` (bitwise xor), unary ``- ~ !``. ``/`` divides as
floating point, ``div`` truncates toward zero; division or modulo by zero is
NULL. Literals: integers (to 2**63-1), decimals, ``'text'`` or ``"text"``
(``\\`` escapes, or a doubled quote), ``true``/``false`` (1/0).

The parser builds Django expressions and ``Q`` objects: values reach the
database only as query parameters, never as SQL text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import (
    BigIntegerField,
    CharField,
    F,
    FloatField,
    Q,
    Value,
)
from django.db.models.expressions import CombinedExpression
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Mod, NullIf
from django.db.models.lookups import (
    Exact,
    GreaterThan,
    GreaterThanOrEqual,
    LessThan,
    LessThanOrEqual,
)

from djqueue.api.condition_tokens import Token, tokenize
from djqueue.exceptions import InvalidCondition
from djqueue.storage.statements.condition_functions import IntDiv, NumericHeader

MAX_LENGTH = 2000
MAX_DEPTH = 40
NUMERIC_FIELDS = {"id", "priority", "attempts"}
TEXT_FIELDS = {"group_key"}
HEADER_PREFIXES = {"headers", "h"}

# Typed nodes: what the parser builds.

NUM, TEXT, BOOL, HEADER = "number", "text", "condition", "header"


@dataclass
class Node:
    type: str
    value: Any  # an expression (NUM, TEXT), a Q (BOOL) or a header name (HEADER)
    pos: int


class Parser:
    # Binary operators by precedence level, loosest first.
    LEVELS: list[set[str]] = [
        {"or", "||"},
        {"xor"},
        {"and", "&&"},
        # level 3 is prefix NOT
        {"=", "!=", "<>", "<", "<=", ">", ">="},
        {"|"},
        {"&"},
        {"<<", ">>"},
        {"+", "-"},
        {"*", "/", "div", "%", "mod"},
        {"^"},
    ]
    NOT_LEVEL = 3
    COMPARISONS = LEVELS[3]

    def __init__(self, source: str) -> None:
        if not isinstance(source, str):
            raise InvalidCondition(f"A condition is a string, not {type(source).__name__}", 1,
                                   "")
        if len(source) > MAX_LENGTH:
            raise InvalidCondition(f"Condition longer than {MAX_LENGTH} characters",
                                   MAX_LENGTH + 1, source[:60])
        self.source = source
        self.tokens = tokenize(source)
        self.i = 0
        self.depth = 0

    def parse(self) -> Q:
        if self.tokens[0].kind == "end":
            raise InvalidCondition("Empty condition", 1, self.source)
        node = self.expression(0)
        end = self.peek()
        if end.kind != "end":
            raise self.error(f"Unexpected {self.describe(end)}", end)
        return self.as_condition(node)

    # Token helpers

    def peek(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def error(self, message: str, token: Token) -> InvalidCondition:
        return InvalidCondition(message, token.pos, self.source)

    @staticmethod
    def describe(token: Token) -> str:
        return "end of condition" if token.kind == "end" else repr(token.text)

    # Grammar

    def nested(self, token: Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"Condition nested more than {MAX_DEPTH} levels deep", token)

    def expression(self, level: int) -> Node:
        if level == self.NOT_LEVEL:
            return self.negation()
        if level > len(self.LEVELS):
            return self.unary()
        ops = self.LEVELS[level if level < self.NOT_LEVEL else level - 1]
        left = self.expression(level + 1)
        while self.peek().kind == "op" and self.peek().text in ops:
            op = self.advance()
            right = self.expression(level + 1)
            following = self.peek()
            if (op.text in self.COMPARISONS and following.kind == "op"
                    and following.text in self.COMPARISONS):
                raise self.error("Comparisons cannot be chained; use and", following)
            left = self.combine(op, left, right)
        return left

    def negation(self) -> Node:
        token = self.peek()
        if token.kind == "op" and token.text == "not":
            self.advance()
            self.nested(token)
            operand = self.negation()
            self.depth -= 1
            return Node(BOOL, ~self.as_condition(operand), token.pos)
        return self.expression(self.NOT_LEVEL + 1)

    def unary(self) -> Node:
        token = self.peek()
        if not (token.kind == "op" and token.text in {"-", "~", "!", "+"}):
            return self.primary()
        self.advance()
        self.nested(token)
        operand = self.unary()
        self.depth -= 1
        if token.text == "!":
            return Node(BOOL, ~self.as_condition(operand), token.pos)
        value = self.as_number(operand, token)
        if token.text == "+":
            return Node(NUM, value, token.pos)
        if token.text == "-":
            return Node(NUM, _arith(Value(0), "-", value), token.pos)
        # ~x == -x - 1 in two's complement, on every database.
        return Node(NUM, _arith(_arith(Value(0), "-", value), "-", Value(1)), token.pos)

    def primary(self) -> Node:
        token = self.advance()
        if token.kind == "number":
            field = BigIntegerField() if isinstance(token.value, int) else FloatField()
            return Node(NUM, Value(token.value, output_field=field), token.pos)
        if token.kind == "string":
            return Node(TEXT, Value(token.value, output_field=CharField()), token.pos)
        if token.kind == "op" and token.text in {"true", "false"}:
            return Node(NUM, Value(int(token.text == "true"), output_field=BigIntegerField()),
                        token.pos)
        if token.kind == "name":
            return self.name(token)
        if token.kind == "op" and token.text == "(":
            self.nested(token)
            inner = self.expression(0)
            self.depth -= 1
            closing = self.advance()
            if closing.text != ")" or closing.kind != "op":
                raise self.error(f"Expected ')' but found {self.describe(closing)}", closing)
            return inner
        raise self.error(f"Unexpected {self.describe(token)}", token)

    def name(self, token: Token) -> Node:
        text = token.text
        if "." in text:
            prefix, header = text.split(".", 1)
            if prefix.lower() not in HEADER_PREFIXES:
                raise self.error(f"Unknown name {text!r}; header values are headers.NAME", token)
            return Node(HEADER, header, token.pos)
        lower = text.lower()
        if lower in NUMERIC_FIELDS:
            return Node(NUM, F(lower), token.pos)
        if lower in TEXT_FIELDS:
            return Node(TEXT, F(lower), token.pos)
        known = ", ".join(sorted(NUMERIC_FIELDS | TEXT_FIELDS))
        raise self.error(f"Unknown name {text!r}; use {known} or headers.NAME", token)

    # Typing and building

    def as_number(self, node: Node, where: Token) -> Any:
        if node.type == NUM:
            return node.value
        if node.type == HEADER:
            return NumericHeader(node.value)
        raise self.error(f"Expected a number, found {node.type}", where)

    def as_condition(self, node: Node) -> Q:
        if node.type == BOOL:
            return node.value
        if node.type == TEXT:
            raise InvalidCondition("Text is not a condition; compare it with something",
                                   node.pos, self.source)
        number = NumericHeader(node.value) if node.type == HEADER else node.value
        return ~Q(Exact(number, Value(0, output_field=BigIntegerField())))

    def combine(self, op: Token, left: Node, right: Node) -> Node:
        text = op.text
        if text in {"or", "||", "and", "&&", "xor"}:
            lq, rq = self.as_condition(left), self.as_condition(right)
            combined = {"or": lq | rq, "||": lq | rq, "and": lq & rq, "&&": lq & rq,
                        "xor": lq ^ rq}[text]
            return Node(BOOL, combined, left.pos)
        if text in self.COMPARISONS:
            return Node(BOOL, self.compare(op, left, right), left.pos)
        a, b = self.as_number(left, op), self.as_number(right, op)
        if text in {"+", "-", "*"}:
            return Node(NUM, _arith(a, text, b), left.pos)
        if text == "/":
            return Node(NUM, CombinedExpression(
                Cast(a, FloatField()), "/", NullIf(Cast(b, FloatField()), Value(0.0)),
                output_field=FloatField()), left.pos)
        if text == "div":
            return Node(NUM, IntDiv(a, b), left.pos)
        if text in {"%", "mod"}:
            return Node(NUM, Mod(a, NullIf(b, Value(0), output_field=FloatField()),
                                 output_field=FloatField()), left.pos)
        if text == "^":
            # a XOR b == (a | b) - (a & b); SQLite has no XOR operator.
            return Node(NUM, _arith(_arith(a, "|", b), "-", _arith(a, "&", b)), left.pos)
        return Node(NUM, _arith(a, text, b), left.pos)  # | & << >>

    def compare(self, op: Token, left: Node, right: Node) -> Q:
        types = {left.type, right.type}
        if BOOL in types:
            raise self.error("A condition cannot be compared; use parentheses around the "
                             "comparison's operands or and/or", op)
        if TEXT in types and NUM in types:
            raise self.error("Text cannot be compared with a number", op)
        if TEXT in types:
            a, b = (self.as_text(n) for n in (left, right))
        else:
            a, b = self.as_number(left, op), self.as_number(right, op)
        text = op.text
        if text in {"!=", "<>"}:
            return ~Q(Exact(a, b))
        lookup = {"=": Exact, "<": LessThan, "<=": LessThanOrEqual, ">": GreaterThan,
                  ">=": GreaterThanOrEqual}[text]
        return Q(lookup(a, b))

    @staticmethod
    def as_text(node: Node) -> Any:
        return KT(f"headers__{node.value}") if node.type == HEADER else node.value


def _arith(a: Any, op: str, b: Any) -> CombinedExpression:
    return CombinedExpression(a, op, b, output_field=BigIntegerField())


def compile_condition(where: Q | str | None) -> Q | None:
    """A receive() condition: a Q object as is, or an expression parsed into one."""
    if where is None or isinstance(where, Q):
        return where
    if isinstance(where, str):
        return Parser(where).parse()
    raise InvalidCondition(
        f"A condition is a Q object or an expression string, not {type(where).__name__}", 1, "")
