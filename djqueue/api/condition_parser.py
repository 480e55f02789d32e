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
the other type is NULL, so the comparison is false). A header name is one
key: ``headers.a__b`` reads the key ``a__b``, as a number and as text.

Operators, loosest first: ``or ||``, ``xor``, ``and &&``, ``not``, comparisons
``= != <> < <= > >=`` (not chained), ``|``, ``&``, ``<< >>``, ``+ -``,
``* / div % mod``, ``^`` (bitwise xor), unary ``- ~ !``. ``/`` divides as
floating point, ``div`` truncates toward zero; division or modulo by zero is
NULL. Literals: integers (to 2**63-1), decimals, ``'text'`` or ``"text"``
(``\\`` escapes, or a doubled quote), ``true``/``false`` (1/0).

The parser builds Django expressions and ``Q`` objects (djqueue.api.condition_builder):
values reach the database only as query parameters, never as SQL text. The
generated SQL is kept within a budget of terms and nesting as it is built, so
any input is compiled, or refused with InvalidCondition, within milliseconds.
"""

from __future__ import annotations

from django.db import DatabaseError
from django.db.models import (
    BigIntegerField,
    CharField,
    F,
    FloatField,
    Q,
    Value,
)

from djqueue.api.condition_builder import BOOL, HEADER, NUM, TEXT, ConditionBuilder, Node, arith
from djqueue.api.condition_tokens import Token, tokenize
from djqueue.exceptions import InvalidCondition
from djqueue.models import Message
from djqueue.storage import dialects
from djqueue.storage.receiver_claims import condition_at_fault

MAX_LENGTH = 2000
MAX_DEPTH = 40
NUMERIC_FIELDS = {"id", "priority", "attempts"}
TEXT_FIELDS = {"group_key"}
HEADER_PREFIXES = {"headers", "h"}

class Parser(ConditionBuilder):
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
        # A literal the database would be sent and could not read (its driver could not
        # encode a lone surrogate; PostgreSQL reads no NUL).
        unreadable = next((i for i, ch in enumerate(source)
                           if ch == "\x00" or "\ud800" <= ch <= "\udfff"), None)
        if unreadable is not None:
            raise InvalidCondition("A NUL character or a lone surrogate, which no database "
                                   "reads,", unreadable + 1, "")
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
            return self.grown(Node(BOOL, ~self.as_condition(operand), token.pos), operand)
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
            return self.grown(Node(BOOL, ~self.as_condition(operand), token.pos), operand)
        value = self.as_number(operand, token)
        if token.text == "+":
            return Node(NUM, value, token.pos, operand.terms, operand.depth)
        if token.text == "-":
            return self.grown(Node(NUM, arith(Value(0), "-", value), token.pos), operand,
                              depth=3)
        # ~x == -x - 1 in two's complement, on every database.
        return self.grown(Node(NUM, arith(arith(Value(0), "-", value), "-", Value(1)),
                               token.pos), operand, depth=4)

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
            return Node(HEADER, header, token.pos, depth=3)  # JSON extraction, typed
        lower = text.lower()
        if lower in NUMERIC_FIELDS:
            return Node(NUM, F(lower), token.pos)
        if lower in TEXT_FIELDS:
            return Node(TEXT, F(lower), token.pos)
        known = ", ".join(sorted(NUMERIC_FIELDS | TEXT_FIELDS))
        raise self.error(f"Unknown name {text!r}; use {known} or headers.NAME", token)


def checked_condition(where: Q | str | None, db: str | None = None) -> Q | None:
    """:func:`compile_condition`, then evaluated once by the database on no rows, so a
    condition it cannot evaluate (too deep for its parser, operands of the wrong
    type) is refused with InvalidCondition before it is used: by a worker's
    ``--where`` as it starts, by the admin's expression filter."""
    condition = compile_condition(where)
    if condition is None:
        return None
    try:
        Message.objects.using(db or dialects.alias()).filter(condition).filter(pk=0).exists()
    except (DatabaseError, RecursionError, OverflowError) as exc:
        if not condition_at_fault(exc):
            raise
        raise InvalidCondition(f"The database cannot evaluate the condition ({exc})", 1,
                               where if isinstance(where, str) else "") from None
    return condition


def compile_condition(where: Q | str | None) -> Q | None:
    """A receive() condition: a Q object as is, or an expression parsed into one."""
    if where is None or isinstance(where, Q):
        return where
    if isinstance(where, str):
        return Parser(where).parse()
    raise InvalidCondition(
        f"A condition is a Q object or an expression string, not {type(where).__name__}", 1, "")
