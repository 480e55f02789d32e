"""The SQL fragments that differ per database vendor, each with the reason for it.

Connection, locking and transaction differences are in djqueue.storage.dialects.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.storage import dialects


def json_number_sql(vendor_name: str, key: str) -> tuple[str, str]:
    """SQL for "the JSON value at ``key`` of {column} if it is a number, else NULL",
    and the key parameter it takes twice.

    Why per vendor: each database names its JSON type test differently, and a
    plain cast of a non-numeric value fails on PostgreSQL but yields 0 on MySQL.
    ``key`` is an identifier (the parser allows nothing else) and still goes
    in as a parameter.
    """
    if vendor_name == "mysql":
        return ("(CASE WHEN JSON_TYPE(JSON_EXTRACT({column}, %s)) IN "
                "('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL') "
                "THEN JSON_EXTRACT({column}, %s) + 0 END)"), f'$."{key}"'
    if vendor_name == "postgresql":
        return ("(CASE WHEN jsonb_typeof({column} -> %s) = 'number' "
                "THEN ({column} ->> %s)::double precision END)"), key
    return ("(CASE WHEN json_type({column}, %s) IN ('integer', 'real') "
            "THEN json_extract({column}, %s) END)"), f'$."{key}"'


def int_div_sql(vendor_name: str) -> str:
    """SQL for MySQL's ``a DIV b`` (truncating toward zero; NULL when b is 0).

    Why per vendor: only MySQL has DIV; PostgreSQL's integer ``/`` errors on a
    zero divisor, and SQLite's ``/`` keeps the fraction of a real operand.
    """
    if vendor_name == "mysql":
        return "(({a}) DIV NULLIF(({b}), 0))"
    if vendor_name == "postgresql":
        return "TRUNC(({a})::numeric / NULLIF(({b})::numeric, 0))"
    return "CAST(((({a}) * 1.0) / NULLIF(({b}), 0)) AS INTEGER)"


def readable_time_sql(vendor_name: str) -> str:
    """SQL for a time ``{a}`` as stored, or NULL where the driver would not read it back.

    Why per vendor: PostgreSQL stores infinities; SQLite stores any text, and its date
    functions take a day its month lacks ('02-30', moved to March through julianday) and
    year 0, both of which Python refuses; MariaDB's and MySQL's driver already reads a
    zero date as None.
    """
    if vendor_name == "postgresql":
        return "(CASE WHEN isfinite({a}) THEN {a} END)"
    if vendor_name == "sqlite":
        return ("(CASE WHEN substr({a}, 1, 4) >= '0001' "
                "AND date(julianday({a})) = substr({a}, 1, 10) THEN {a} END)")
    return "{a}"


def copied_time_sql(vendor_name: str) -> str:
    """SQL for a time ``{a}`` copied into another table's row: as stored, but on MySQL
    and MariaDB a zero date (a hand edit's) becomes the copy's own time, a ``%s``.

    Why: MySQL's default mode (strict, with NO_ZERO_DATE) refuses to write a zero date,
    error 1292, so the copy of such a row failed, and with it the delete of the row.
    ``YEAR`` reads a zero date as 0 without a warning that strict mode would raise.
    """
    if vendor_name == "mysql":
        return "IF(YEAR({a}) = 0, %s, {a})"
    return "{a}"


def bit_xor_sql(vendor_name: str) -> str:
    """SQL for the bitwise XOR of the integers ``{a}`` and ``{b}``, each written once.

    Why per vendor: MySQL spells it ``^``, PostgreSQL ``#``, and SQLite has no XOR
    operator; there ``(a | b) - (a & b)`` names each operand twice, so a chain of
    XORs would grow exponentially, and a subquery names each once (SQLite lets a
    subquery in FROM refer to the outer row).
    """
    if vendor_name == "mysql":
        return "(({a}) ^ ({b}))"
    if vendor_name == "postgresql":
        return "(({a}) # ({b}))"
    return "(SELECT (x | y) - (x & y) FROM (SELECT ({a}) AS x, ({b}) AS y))"


def byte_length_sql(vendor_name: str) -> str:
    """SQL for the length in bytes of the text ``{}``.

    Why per vendor: LENGTH counts characters on PostgreSQL and SQLite (bytes on
    MySQL); OCTET_LENGTH counts bytes on MySQL and PostgreSQL but SQLite has it
    only from 3.43, and Debian 12's Python links 3.40.
    """
    if vendor_name == "sqlite":
        return "LENGTH(CAST({} AS BLOB))"
    return "OCTET_LENGTH({})"


def clock_sql(vendor_name: str) -> str:
    """SQL for the database server's clock now, in seconds since the epoch (a double),
    fixed for the statement where the database allows (an index range may use it).

    Why the database's clock: limits are shared by workers on several hosts, whose
    clocks differ; the server's is the one they all read. Why per vendor: each
    names it differently. MySQL's NOW(6) is the statement's start, PostgreSQL's
    clock_timestamp() the moment it is read; SQLite's 'now' is fixed for a
    statement, to the millisecond (its writers are serialised, so that is enough).
    """
    if vendor_name == "mysql":
        return "(UNIX_TIMESTAMP(NOW(6)) + 0e0)"
    if vendor_name == "postgresql":
        return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
    return "((julianday('now') - 2440587.5) * 86400.0)"


def locked_clock_sql(vendor_name: str) -> str:
    """``clock_sql`` for the select list of a ``SELECT ... FOR UPDATE``: the clock read
    once the row is locked, after any wait for it, when a claim takes the row's tokens.
    MySQL's SYSDATE(6) is read then (NOW(6) is the statement's start, before the wait:
    a claim stamped so seems to start before the claims it waited for). PostgreSQL
    evaluates clock_timestamp() again after a wait for a row that was changed meanwhile.
    Not for a WHERE clause: MySQL can use no index range on SYSDATE()."""
    if vendor_name == "mysql":
        return "(UNIX_TIMESTAMP(SYSDATE(6)) + 0e0)"
    return clock_sql(vendor_name)


def upsert_options(unique_fields: list[str], update_fields: list[str]) -> dict:
    """``bulk_create`` options for an insert that, on a duplicate key, updates instead.

    Why per vendor: MySQL's ON DUPLICATE KEY UPDATE applies to every unique key
    and cannot name one, so Django refuses ``unique_fields`` there; PostgreSQL
    and SQLite need them for ON CONFLICT (...).
    """
    options: dict = {"update_conflicts": True, "update_fields": update_fields}
    if dialects.connection().vendor != "mysql":
        options["unique_fields"] = unique_fields
    return options


#: The alias an upsert gives the row it tried to insert, where the database names it
#: (dialects.names_inserted_row).
INSERTED_ROW = "inserted_row"


def upsert_clause(conn: BaseDatabaseWrapper, key: str | Sequence[str], columns: list[str], *,
                  after_select: bool = False) -> str:
    """What follows an INSERT's rows so that a row whose ``key`` (a column, or the
    columns of a unique constraint) exists gets ``columns`` from the inserted row
    instead. ``after_select``: the rows come from a SELECT that :func:`upsert_source`
    wrapped.

    Why per vendor: MySQL says ON DUPLICATE KEY UPDATE (applying to every unique key,
    see :func:`upsert_options`) and names the inserted row by an alias after the
    VALUES list, or by the SELECT's derived table (MariaDB and MySQL before 8.0.19 by
    ``VALUES(c)``); the others say ON CONFLICT and ``EXCLUDED.c``."""
    q = conn.ops.quote_name
    if conn.vendor == "mysql":
        return _on_duplicate_key(conn, ", ".join(
            f"{q(c)} = {_inserted(conn, q(c))}" for c in columns), after_select)
    keys = [key] if isinstance(key, str) else key
    return (f"ON CONFLICT ({', '.join(q(k) for k in keys)}) DO UPDATE SET "
            + ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in columns))


def upsert_source(conn: BaseDatabaseWrapper, select: str) -> str:
    """``select`` (whose columns are named as the table's) made the source of an
    ``INSERT ... SELECT`` that :func:`upsert_clause` with ``after_select`` follows.

    Why: MySQL has no alias for an ``INSERT ... SELECT``'s row; its derived table's
    name serves instead (see dialects.names_inserted_row)."""
    if dialects.names_inserted_row(conn):
        return f"SELECT * FROM ({select}) AS {INSERTED_ROW}"
    return select


def _inserted(conn: BaseDatabaseWrapper, column: str) -> str:
    """MySQL's reference to ``column`` (quoted) of the row an upsert tried to insert."""
    return (f"{INSERTED_ROW}.{column}" if dialects.names_inserted_row(conn)
            else f"VALUES({column})")


def _on_duplicate_key(conn: BaseDatabaseWrapper, sets: str, after_select: bool) -> str:
    alias = "" if after_select or not dialects.names_inserted_row(conn) else f"AS {INSERTED_ROW} "
    return f"{alias}ON DUPLICATE KEY UPDATE {sets}"


def add_counters_sql(conn: BaseDatabaseWrapper, table: str, keys: list[str], columns: list[str],
                     counters: list[str], rows: int) -> str:
    """An INSERT of ``rows`` rows (``columns``, keys first; no two with the same ``keys``)
    that, for each row whose ``keys`` exist, adds its ``counters`` to that row's instead.

    Why: incrementing a row that may not exist yet is one atomic statement this
    way; update-then-insert races, and insert-ignore-then-update deadlocks on
    InnoDB (both inserters take a shared lock, then both want the exclusive
    one). Why rows in one statement rather than ``executemany``: mysqlclient makes
    one statement of an ``executemany`` only when ON DUPLICATE KEY follows the rows
    directly, not after a row alias. Why per vendor: as in :func:`upsert_clause`.
    Names are djqueue's own; values are parameters.
    """
    q = conn.ops.quote_name
    row = f"({', '.join(['%s'] * len(columns))})"
    head = (f"INSERT INTO {q(table)} ({', '.join(q(c) for c in columns)}) "
            f"VALUES {', '.join([row] * rows)}")
    if conn.vendor == "mysql":
        sets = ", ".join(f"{q(c)} = {q(table)}.{q(c)} + {_inserted(conn, q(c))}"
                         for c in counters)
        return f"{head} {_on_duplicate_key(conn, sets, False)}"
    sets = ", ".join(f"{q(c)} = {q(table)}.{q(c)} + excluded.{q(c)}" for c in counters)
    return f"{head} ON CONFLICT ({', '.join(q(k) for k in keys)}) DO UPDATE SET {sets}"


#: auto_increment_increment per database alias, read once per process (see below).
_id_steps: dict[str, int] = {}


def ids_of_multi_row_insert(conn: BaseDatabaseWrapper, first_id: int, rows: int) -> list[int]:
    """The ids a multi-row ``INSERT … VALUES`` gave its rows on MySQL, in row order.

    Why it can be known: MySQL has no ``RETURNING``, but ``LAST_INSERT_ID()`` (the
    driver's ``lastrowid``) is the first row's id, and InnoDB takes a statement's ids
    in one block when it knows the row count before it starts (a "simple insert"), in
    every ``innodb_autoinc_lock_mode``: only an ``INSERT … SELECT`` can have gaps. The
    ids then follow one another by ``auto_increment_increment`` (1, unless the server
    is one of several primaries that share out ids)."""
    step = _id_steps.get(conn.alias)
    if step is None:
        with conn.cursor() as cursor:
            cursor.execute("SELECT @@auto_increment_increment")
            step = _id_steps[conn.alias] = int(cursor.fetchone()[0])
    return [first_id + index * step for index in range(rows)]
