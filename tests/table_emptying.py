"""After a transactional test, the tables it wrote to are emptied: not every table.

Why: Django's ``TransactionTestCase`` empties every table of every app after each test
(the ``flush`` command), then sends ``post_migrate``, which makes the content types and
permissions again. Nine in ten of these tests are transactional (the worker, reaper and
server processes they start read what the test wrote), and that teardown was the largest
part of a short test's time on MariaDB and PostgreSQL (PostgreSQL truncates each of some
forty tables; post_migrate writes some two hundred rows again): docs/testing.md has the
figures. A test writes to a few tables. Here one query finds those that hold rows, and
only they are emptied, by the statements Django's flush would run for them (with
``CASCADE`` on PostgreSQL, as Django's flush of a subset of apps has). The content types
and permissions, which migrate made and no test changes, are kept, so post_migrate has
nothing to make again and is not sent.

A test that asks for Django's other teardowns (``serialized_rollback``,
``available_apps``) gets Django's own.

Django internals: this replaces ``TransactionTestCase._fixture_teardown`` and calls its
``_databases_names``, both private to Django and free to change in a release. It is the
one place the tests do so; checked under Django 5.2 and 6.1 (the Django 5.2 step of
``make test``). If a release changes them, this module is where the tests break first.
"""

from __future__ import annotations

from django.core.management.color import no_style
from django.db import connections
from django.test import TransactionTestCase

#: Made by migrate's post_migrate and changed by no test: kept across tests.
KEPT = frozenset({"django_content_type", "auth_permission"})

_django_teardown = TransactionTestCase._fixture_teardown


def empty_written_tables(db: str) -> list[str]:
    """Empty the tables of database ``db`` that hold rows (but KEPT); returns them."""
    connection = connections[db]
    tables = [t for t in connection.introspection.django_table_names(
        only_existing=True, include_views=False) if t not in KEPT]
    written = holding_rows(db, tables)
    if written:
        connection.ops.execute_sql_flush(
            connection.ops.sql_flush(no_style(), written, allow_cascade=True))
    return written


def holding_rows(db: str, tables: list[str]) -> list[str]:
    """Which of ``tables`` hold a row, by one query."""
    if not tables:
        return []
    connection = connections[db]
    quote = connection.ops.quote_name
    source = " FROM DUAL" if connection.vendor == "mysql" else ""
    sql = " UNION ALL ".join(f"SELECT %s{source} WHERE EXISTS (SELECT 1 FROM {quote(t)})"
                             for t in tables)
    with connection.cursor() as cursor:
        cursor.execute(sql, tables)
        return [name for (name,) in cursor.fetchall()]


def _fixture_teardown(self: TransactionTestCase) -> None:
    if self.available_apps is not None or self.serialized_rollback:
        _django_teardown(self)
        return
    for db in self._databases_names(include_mirrors=False):
        empty_written_tables(db)


def install() -> None:
    """Make every transactional test of this run end with ``empty_written_tables``."""
    TransactionTestCase._fixture_teardown = _fixture_teardown  # type: ignore[method-assign]
