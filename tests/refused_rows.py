"""A database that refuses new rows of one table, for the tests of what a process does
when its registration fails (djqueue.storage.registration)."""

from __future__ import annotations

from django.db import connection


class RefusedRows:
    """While on, the database refuses every new row of ``table``: a trigger raises a
    real error from the real server, as a lost privilege or a full disk would."""

    NAME = "djq_test_refuse_rows"

    def __init__(self, table: str) -> None:
        self.table = connection.ops.quote_name(table)
        self.is_on = False

    def on(self) -> None:
        name, table = self.NAME, self.table
        statements = {
            "mysql": [f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW "
                      "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'"],
            "postgresql": [f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                           "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
                           f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW "
                           f"EXECUTE FUNCTION {name}()"],
            "sqlite": [f"CREATE TRIGGER {name} BEFORE INSERT ON {table} BEGIN "
                       "SELECT RAISE(ABORT, 'refused by the test'); END"],
        }[connection.vendor]
        self._run(statements)
        self.is_on = True

    def off(self) -> None:
        if not self.is_on:
            return
        name = self.NAME
        self._run({"mysql": [f"DROP TRIGGER {name}"],
                   "postgresql": [f"DROP TRIGGER {name} ON {self.table}",
                                  f"DROP FUNCTION {name}()"],
                   "sqlite": [f"DROP TRIGGER {name}"]}[connection.vendor])
        self.is_on = False

    @staticmethod
    def _run(statements: list[str]) -> None:
        with connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)
