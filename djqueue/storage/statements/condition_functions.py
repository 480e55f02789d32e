"""The SQL functions the condition language compiles to, where the ORM has none.

A header compared as a number must be a JSON number in every database, and
integer division must truncate toward zero with NULL for a zero divisor, as
MySQL's ``DIV`` does; each database spells both differently (djqueue.storage.dialects).
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BigIntegerField, F, FloatField, Func
from django.db.models.sql.compiler import SQLCompiler

from djqueue.storage.statements.vendor_sql import bit_xor_sql, int_div_sql, json_number_sql


class NumericHeader(Func):
    """A header's value if it is a JSON number, else NULL (see vendor_sql.json_number_sql)."""

    output_field = FloatField()

    def __init__(self, name: str) -> None:
        super().__init__(F("headers"))
        self.header = name

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper,
               function: str | None = None, template: str | None = None,
               arg_joiner: str | None = None, **extra: Any) -> tuple[str, tuple[Any, ...]]:
        column, params = compiler.compile(self.source_expressions[0])
        sql, key = json_number_sql(connection.vendor, self.header)
        return sql.format(column=column), (*params, key, key)


class _VendorBinaryOperator(Func):
    """Two integer operands written into the database's own template for the operator
    (``{a}`` and ``{b}``), which each operator's ``vendor_template`` gives for a
    connection's vendor (djqueue.storage.statements.vendor_sql)."""

    output_field = BigIntegerField()
    arity = 2
    vendor_template: ClassVar[staticmethod[[str], str]]

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper,
               function: str | None = None, template: str | None = None,
               arg_joiner: str | None = None, **extra: Any) -> tuple[str, tuple[Any, ...]]:
        (a, a_params), (b, b_params) = (compiler.compile(e) for e in self.source_expressions)
        sql = self.vendor_template(connection.vendor).format(a=a, b=b)
        return sql, (*a_params, *b_params)


class IntDiv(_VendorBinaryOperator):
    """Integer division truncating toward zero, NULL for a zero divisor (MySQL's DIV)."""

    vendor_template = staticmethod(int_div_sql)


class BitXor(_VendorBinaryOperator):
    """Bitwise XOR of two integers, each operand written once (see vendor_sql.bit_xor_sql)."""

    vendor_template = staticmethod(bit_xor_sql)
