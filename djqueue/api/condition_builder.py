"""Building a condition's SQL expressions from its parsed nodes, typed and within budget.

The parser (djqueue.api.condition_parser) reads the grammar; this turns each
operator into ORM expressions that every database evaluates alike, and keeps
the generated SQL within MAX_TERMS terms and MAX_SQL_DEPTH levels, checked as
each node is built, so no input takes long to compile or overflows a
database's parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import BigIntegerField, Case, FloatField, IntegerField, Q, Value, When
from django.db.models.expressions import CombinedExpression
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Mod, NullIf
from django.db.models.lookups import (
    Exact,
    GreaterThan,
    GreaterThanOrEqual,
    LessThan,
    LessThanOrEqual,
)

from djqueue.api.condition_tokens import Token
from djqueue.exceptions import InvalidCondition
from djqueue.storage.statements.condition_functions import BitXor, IntDiv, NumericHeader

#: The most terms (names, values, operators) the generated SQL may hold: the budget
#: that keeps compiling any condition within milliseconds.
MAX_TERMS = 256
#: The deepest nesting of the generated SQL: SQLite's parser overflows near 100.
MAX_SQL_DEPTH = 60
COMPARISONS = {"=", "!=", "<>", "<", "<=", ">", ">="}

# Typed nodes: what the parser builds.

NUM, TEXT, BOOL, HEADER = "number", "text", "condition", "header"


@dataclass
class Node:
    type: str
    value: Any  # an expression (NUM, TEXT), a Q (BOOL) or a header name (HEADER)
    pos: int
    #: Terms of the SQL it compiles to, and how deeply that SQL nests.
    terms: int = 1
    depth: int = 1



class ConditionBuilder:
    """The typing and building half of the condition parser."""

    source: str

    def error(self, message: str, token: Token) -> InvalidCondition:
        return InvalidCondition(message, token.pos, self.source)


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

    def grown(self, node: Node, *operands: Node, depth: int = 1,
              last_depth: int | None = None) -> Node:
        """``node``, built over ``operands``, with its size; InvalidCondition past the
        budget (checked as the condition is parsed, so no input compiles for long).
        ``depth``: how deep ``node`` nests its operands; ``last_depth``: its last
        operand, where that costs more."""
        node.terms = 1 + sum(o.terms for o in operands)
        adds = [depth] * len(operands)
        if operands and last_depth is not None:
            adds[-1] = last_depth
        node.depth = max((add + o.depth for add, o in zip(adds, operands, strict=True)),
                         default=depth)
        if node.terms > MAX_TERMS:
            raise InvalidCondition(f"Condition too complex: more than {MAX_TERMS} terms",
                                   node.pos, self.source)
        if node.depth > MAX_SQL_DEPTH:
            raise InvalidCondition(f"Condition too complex: nests more than {MAX_SQL_DEPTH} "
                                   "levels deep in SQL", node.pos, self.source)
        return node

    #: How deep each operator nests its operands in the generated SQL, in units of a
    #: plain ``(a + b)``: measured as SQLite's parser stack, the first to overflow
    #: (a chain of n ``+`` overflows it near n = 90, of ``xor`` near 18, of ``^`` near 7;
    #: of ``<<``, whose count is cast, near 86).
    DEPTH = {"/": 3, "%": 3, "mod": 3, "div": 5, "xor": 5, "^": 12, "<<": 2, ">>": 2}
    #: The same for the right operand, which costs more: SQLite's parser keeps what
    #: stands left of a parenthesised right operand on its stack while it reads it.
    #: Measured in a claim's statement: ``a + (b + (c + …))`` overflows it at 27 levels,
    #: ``/`` and ``%`` at 10, ``div`` 9, ``^`` 7, ``<<`` 16, ``xor`` 11; ``and`` and
    #: ``or`` not within the parser's 40 levels of parentheses.
    RIGHT_DEPTH = {"/": 7, "%": 7, "mod": 7, "div": 8, "xor": 7, "^": 12, "<<": 5, ">>": 5,
                   "and": 1, "&&": 1, "or": 1, "||": 1}

    def combine(self, op: Token, left: Node, right: Node) -> Node:
        return self.grown(self._combine(op, left, right), left, right,
                          depth=self.DEPTH.get(op.text, 1),
                          last_depth=self.RIGHT_DEPTH.get(op.text, 3))

    def _combine(self, op: Token, left: Node, right: Node) -> Node:
        text = op.text
        if text == "xor":
            # Each operand once: (a ? 1 : 0) + (b ? 1 : 0) = 1. Django's own XOR repeats
            # both operands on databases without one, so a chain would grow exponentially.
            one = Value(1, output_field=BigIntegerField())
            flags = [Case(When(self.as_condition(n), then=one),
                          default=Value(0, output_field=BigIntegerField())) for n in (left, right)]
            return Node(BOOL, Q(Exact(arith(flags[0], "+", flags[1]), one)), left.pos)
        if text in {"or", "||", "and", "&&"}:
            lq, rq = self.as_condition(left), self.as_condition(right)
            return Node(BOOL, lq | rq if text in {"or", "||"} else lq & rq, left.pos)
        if text in COMPARISONS:
            return Node(BOOL, self.compare(op, left, right), left.pos)
        a, b = self.as_number(left, op), self.as_number(right, op)
        if text in {"+", "-", "*"}:
            return Node(NUM, arith(a, text, b), left.pos)
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
            return Node(NUM, BitXor(a, b), left.pos)
        if text in {"<<", ">>"}:
            # PostgreSQL shifts by an integer only (int2/int4/int8 << int4): a count sent
            # as a bigint parameter (server-side binding) would find no operator.
            return Node(NUM, arith(a, text, Cast(b, IntegerField())), left.pos)
        return Node(NUM, arith(a, text, b), left.pos)  # | &

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
        # The header's name as one key, as NumericHeader reads it: ``headers.a__b`` is
        # the key "a__b", never the path a -> b.
        return KeyTextTransform(node.value, "headers") if node.type == HEADER else node.value



def arith(a: Any, op: str, b: Any) -> CombinedExpression:
    return CombinedExpression(a, op, b, output_field=BigIntegerField())
