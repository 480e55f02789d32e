"""Statements past Django's cursor layers: the single send straight to each driver,
mysqlclient's own escaping, a transaction opened by ``BEGIN`` on MySQL/MariaDB, and an
index hint in a compiled query."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from django.db import DatabaseError, IntegrityError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils.asyncio import async_unsafe

from djqueue.storage.fastpath import verified


def with_index_hint(query: models.QuerySet, table: str, hint: str) -> models.QuerySet | list:
    """The rows of ``query`` with ``hint`` (e.g. FORCE INDEX) after its table name.

    Why: the ORM has no way to name an index, and MariaDB may choose another for
    a conditional claim, scanning and locking far more rows. The compiled SQL
    gets the hint after its ``FROM`` and is run raw. Plain path: the query as is."""
    if not verified.enabled or not hint:
        return query
    sql, params = _hinted_sql(query, table, hint)
    return list(query.model.objects.using(query.db).raw(sql, params))


def ids_with_index_hint(query: models.QuerySet, table: str, hint: str) -> list[Any]:
    """The primary keys of ``query``'s rows, read with ``hint`` after its table name
    (as :func:`with_index_hint`), without building an instance per row."""
    ids = query.values_list("pk", flat=True)
    if not verified.enabled or not hint:
        return list(ids)
    sql, params = _hinted_sql(ids, table, hint)
    with connections[query.db].cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def _hinted_sql(query: models.QuerySet, table: str, hint: str) -> tuple[str, Any]:
    sql, params = query.query.get_compiler(using=query.db).as_sql()
    source = f"FROM {table}"
    if source not in sql:
        raise AssertionError(f"Unexpected claim SQL: {sql}")
    return sql.replace(source, f"{source}{hint}", 1), params


def _straight_to_driver(conn: BaseDatabaseWrapper) -> bool:
    """Whether a statement may skip ``connection.cursor()``'s layers: nothing observes
    queries (no ``execute_wrapper``, no query logging). Then the checks ``cursor()``
    makes are made here, and the caller translates errors as its cursor would."""
    if not verified.enabled or conn.execute_wrappers or conn.queries_logged:
        return False
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    conn.validate_thread_sharing()
    conn.validate_no_broken_transaction()
    return True


@async_unsafe
def insert_written_out(conn: BaseDatabaseWrapper, sql: str) -> int:
    """Run a one-row INSERT whose values are escaped into ``sql`` (MySQL/MariaDB) and
    return the new row's id.

    Why not ``connection.cursor()``: a plain send is one such statement, and the
    cursor layers (Django's wrapper and execute hooks, the backend's wrapper, the
    driver's cursor and its result bookkeeping) cost a fifth of a send's CPU.
    When nothing observes queries (:func:`_straight_to_driver`) the statement goes
    straight to the driver's connection, with the same error translation.
    Plain path: a cursor.
    """
    if not _straight_to_driver(conn):
        with conn.cursor() as cursor:
            cursor.execute(sql)
            return cursor.lastrowid
    driver = conn.connection
    with conn.wrap_database_errors:
        try:
            driver.query(sql.encode(driver.encoding))
        except _driver_module(conn).OperationalError as exc:
            # As the MySQL backend's cursor does: these codes are integrity errors.
            from django.db.backends.mysql.base import (
                CursorWrapper,
            )

            if exc.args[0] in CursorWrapper.codes_for_integrityerror:
                raise IntegrityError(*exc.args) from exc
            raise
        return driver.insert_id()


@async_unsafe
def insert_returning_id(conn: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> int:
    """Run a one-row ``INSERT … RETURNING id`` on PostgreSQL with ``params`` bound by
    the server, and return the new row's id.

    Why: Django's psycopg 3 cursor binds on the client by default: it quotes every
    parameter into the text in Python, behind Django's cursor wrapper. A plain send
    is one such statement; that quoting and those layers were a quarter of its CPU
    (docs/performance.md). psycopg's own cursor on the same connection (the same
    transaction, the same adapters) sends the values apart, as Django does with
    ``server_side_binding``, which djqueue's tests run too. Django's setting of
    ``prepare_threshold`` holds: nothing is prepared unless the project asked.
    Plain path (on psycopg2 too, or while queries are observed): a cursor."""
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not (is_psycopg3 and _straight_to_driver(conn)):
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()[0]
    with conn.wrap_database_errors:
        cursor = _driver_cursor(conn)
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


@async_unsafe
def select_rows(conn: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> list[tuple]:
    """Run a short read written by djqueue (``%s`` parameters) and return its rows as
    the driver gives them.

    Why: a send after a pause of a second reads its queue's row and the workers' wake
    addresses again, so a process that sends less often than once a second pays both
    on every send; through the ORM each read took longer than the insert itself
    (docs/performance.md). When nothing observes queries (:func:`_straight_to_driver`)
    the statement goes to the driver's own cursor on the same connection, with the
    same error translation. Plain path: a cursor."""
    if not _straight_to_driver(conn):
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    with conn.wrap_database_errors:
        if conn.vendor == "sqlite":
            return conn.connection.execute(_qmark(sql), params).fetchall()
        if conn.vendor == "postgresql":
            from django.db.backends.postgresql.psycopg_any import is_psycopg3

            if is_psycopg3:
                cursor = _driver_cursor(conn)
                cursor.execute(sql, params)
                return cursor.fetchall()
        with contextlib.closing(conn.connection.cursor()) as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())


def _driver_cursor(conn: BaseDatabaseWrapper) -> Any:
    """psycopg's own cursor on ``conn``'s connection, made once for each connection.

    Why: a psycopg cursor copies its connection's adapters when made, which Django's
    many adapters made 40 % of a single insert's CPU (50 of 124 µs). One is kept on
    Django's connection object for as long as the driver's connection lives; a
    cursor is not tied to a transaction, and Django's connection serves one thread
    (one shared between threads gets a new cursor each time)."""
    driver = conn.connection
    if conn.allow_thread_sharing:
        return _driver_module(conn).Cursor(driver)
    kept = conn.__dict__.get("_djqueue_driver_cursor")
    if kept is None or kept[0] is not driver or kept[1].closed:
        kept = conn.__dict__["_djqueue_driver_cursor"] = (driver, _driver_module(conn).Cursor(driver))
    return kept[1]


def _driver_module(conn: BaseDatabaseWrapper) -> Any:
    """The driver's DB-API module: every backend's ``Database``, which the base class
    does not declare."""
    return conn.Database  # type: ignore[attr-defined]


@async_unsafe
def insert_lastrowid(conn: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> int:
    """Run a one-row INSERT on SQLite with ``params`` and return the new row's id.

    Why: a plain send is one such statement, and on SQLite, where the insert itself
    takes 50 µs, Django's cursor layers took 30 µs more: its wrappers and hooks, and
    the backend's rewrite of every ``%s`` to ``?`` by a regular expression on each
    call. When nothing observes queries (:func:`_straight_to_driver`) the statement,
    rewritten once, goes to the sqlite3 connection itself, with the same error
    translation. Plain path: a cursor."""
    if not _straight_to_driver(conn):
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.lastrowid
    with conn.wrap_database_errors:
        return conn.connection.execute(_qmark(sql), params).lastrowid


@functools.lru_cache(maxsize=64)
def _qmark(sql: str) -> str:
    """``sql`` with sqlite3's parameter marker, as Django's SQLite cursor rewrites it
    (a statement of djqueue's own, without ``%%`` or named parameters)."""
    return sql.replace("%s", "?")


def driver_literal(conn: BaseDatabaseWrapper) -> Callable[[object], str] | None:
    """On MySQL/MariaDB, the driver's escaping of one value into SQL text; else None.

    Why: mysqlclient has no server-side parameters: it escapes every parameter
    with the connection's ``literal()`` and interpolates it into the statement
    itself. Values a batch's rows share are escaped once by that same function,
    so the server receives byte for byte what parameters would have produced.
    Plain path (None): every value a parameter."""
    if not verified.enabled or conn.vendor != "mysql":
        return None
    conn.ensure_connection()
    driver = conn.connection
    literal, string_literal, encoding = driver.literal, driver.string_literal, driver.encoding

    def escape(value: object) -> str:
        if type(value) is str:  # what literal() does with a str, without its type tests
            return string_literal(value.encode(encoding)).decode(encoding)
        return literal(value).decode(encoding)

    return escape


@contextlib.contextmanager
def mysql_transaction(conn: BaseDatabaseWrapper, db: str) -> Iterator[None]:
    """A transaction on MySQL/MariaDB opened by ``BEGIN``, two round trips fewer.

    Why: Django opens a transaction by turning autocommit off and ends it by
    committing and turning autocommit on again; mysqlclient sends each toggle to
    the server, so a transaction of two statements took five round trips. Here a
    BEGIN opens it (the session stays in autocommit mode, so nothing needs
    restoring after COMMIT) and Django is told autocommit is off: nested atomic
    blocks still become savepoints, on_commit hooks still wait for the commit,
    and an error still rolls everything back. Plain path: ``transaction.atomic``."""
    if not verified.enabled:
        with transaction.atomic(using=db):
            yield
        return
    with conn.cursor() as cursor:
        cursor.execute("BEGIN")
    conn.autocommit = False
    try:
        with transaction.atomic(using=db, savepoint=False):
            yield
        conn.commit()
    except BaseException:
        try:
            conn.rollback()
        except DatabaseError:  # the connection is gone: the server rolled back
            conn.close()
        raise
    finally:
        if conn.connection is None:
            conn.autocommit = True  # a new connection starts in autocommit mode
        else:
            conn.set_autocommit(True)  # no statement: the session never left it


