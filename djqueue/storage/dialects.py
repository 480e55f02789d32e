"""Every difference between the database vendors in how djqueue connects, locks and
transacts, each with the reason for it. The SQL fragments that differ per vendor
are in djqueue.storage.statements.vendor_sql, the session locks' statements in
djqueue.storage.session_locks."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, TypeVar, cast

from django.db import OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from djqueue.conf import get_settings
from djqueue.storage import fastpath
from djqueue.storage.database_vendors import vendor_of

if TYPE_CHECKING:
    from django.db.backends.mysql.base import DatabaseWrapper as MySQLDatabaseWrapper

T = TypeVar("T")
DEADLOCK_RETRIES = 5


#: The database the operation in progress works on, when it is not DATABASE (see using).
_current: ContextVar[str | None] = ContextVar("djqueue_database", default=None)


def alias() -> str:
    """The database alias of the operation in progress: the one ``using`` set, or the
    home database (``DJQUEUE["DATABASE"]``)."""
    return _current.get() or get_settings().DATABASE


class using:  # used like a function: ``with using(db) as alias:``
    """Run the block on database ``db`` (None: leave the current one).

    Why a context and not only arguments: what a message's handler, a task's record,
    a worker's or the reaper's pass write follows the database of the queue they
    serve (djqueue.storage.placement); the entry points (the API's functions, a
    worker's claim and handler runs, the reaper's pass over each database) say it
    once here instead of every function below them taking it along.

    A class rather than a generator context manager: a worker enters it once a
    handler run, where the generator's machinery costs more than the rest.
    """

    __slots__ = ("db", "token")

    def __init__(self, db: str | None) -> None:
        self.db = db
        self.token: Token[str | None] | None = None

    def __enter__(self) -> str:
        if self.db is None:
            return alias()
        self.token = _current.set(self.db)
        return self.db

    def __exit__(self, *exc_info: object) -> None:
        if self.token is not None:
            _current.reset(self.token)
            self.token = None


def connection() -> BaseDatabaseWrapper:
    return connections[alias()]


def claims_by_skip_locked(conn: BaseDatabaseWrapper | None = None) -> bool:
    """Whether claims use ``SELECT ... FOR UPDATE SKIP LOCKED``.

    Why: SQLite has no row locks (writers are serialised), so there a claim is
    one ``UPDATE ... WHERE id IN (SELECT ... LIMIT n)`` stamped with a lease
    token and read back by it; MariaDB >= 10.6, MySQL >= 8 and PostgreSQL
    skip rows another transaction holds, so workers never wait on each other.
    """
    conn = conn or connection()
    return bool(conn.features.has_select_for_update_skip_locked)


@contextlib.contextmanager
def claim_isolation(conn: BaseDatabaseWrapper | None = None) -> Iterator[None]:
    """Run the next transaction at READ COMMITTED on MySQL/MariaDB.

    Why: at REPEATABLE READ InnoDB takes next-key locks on the scanned index
    range, which blocks producers inserting into it and invites deadlocks.
    Django's MySQL backend already uses READ COMMITTED unless the project set
    another ``isolation_level``; only then is the extra statement sent (and it
    can only be sent outside a transaction).
    """
    conn = conn or connection()
    if (
        conn.vendor == "mysql"
        and not conn.in_atomic_block
        and (getattr(conn, "isolation_level", None) or "") != "read committed"
    ):
        with conn.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    yield


@contextlib.contextmanager
def short_transaction(db: str) -> Iterator[None]:
    """``transaction.atomic(using=db)`` for the hot path's transactions, with two
    round trips fewer on MySQL/MariaDB.

    Why: Django opens a transaction by turning autocommit off and ends it by
    committing and turning autocommit on again; mysqlclient sends each toggle
    to the server as a statement, so a transaction of two statements took five
    round trips. Here a BEGIN opens it (the session's autocommit setting stays
    on, so nothing needs restoring after COMMIT) and Django is told that
    autocommit is off: nested atomic blocks still become savepoints, on_commit
    hooks still wait for the commit, and an error still rolls everything back.
    """
    conn = connections[db]
    if conn.vendor != "mysql" or conn.in_atomic_block or not conn.get_autocommit():
        with transaction.atomic(using=db):
            yield
        return
    with fastpath.mysql_transaction(conn, db):
        yield


CLAIM_INDEX = "djqueue_msg_claim"


def continues_claims(conn: BaseDatabaseWrapper) -> bool:
    """Whether a draining receiver's claim continues after its last one (claim_cursor).

    Why MySQL/MariaDB only: InnoDB leaves the claim index entries of claimed and
    deleted messages in place until its purge runs, and every claim from the head
    stepped over them. PostgreSQL's index scans mark dead entries themselves."""
    return conn.vendor == "mysql"


def locks_rows_before_filtering(conn: BaseDatabaseWrapper) -> bool:
    """Whether a locking read locks each row it reads before its WHERE turns it down.

    Why: InnoDB (MySQL/MariaDB) locks an index entry, then tests the conditions the
    index cannot, and lets go of a row that fails them only after. A conditioned
    claim held, for that moment, rows it did not take, and a plain claim beside it
    skipped them as locked (about one round in 16 in a test of two claims at once).
    PostgreSQL filters before it locks; SQLite has no row locks."""
    return conn.vendor == "mysql"


def reads_datetimes_as_text(conn: BaseDatabaseWrapper) -> bool:
    """Whether the claim reads its datetime columns as text, parsed by ``fromisoformat``.

    Why: mysqlclient parses DATETIME values in Python (then Django's converter makes
    them aware), and a claim of 100 rows carries 200 of them; ``fromisoformat`` of
    the text is cheaper (figures on the docs' performance page)."""
    return conn.vendor == "mysql"


def sql_dialect(conn: BaseDatabaseWrapper) -> str:
    """The SQL ``conn``'s server speaks, the key of the caches of statements built once:
    the vendor, with MariaDB, MySQL and MySQL before :func:`names_inserted_row` apart.
    Why not the vendor: MariaDB and MySQL share Django's, and one process may use both."""
    if conn.vendor != "mysql":
        return conn.vendor
    return "mariadb" if is_mariadb(conn) else (
        "mysql" if names_inserted_row(conn) else "mysql<8.0.19")


def names_inserted_row(conn: BaseDatabaseWrapper) -> bool:
    """Whether an upsert reads the row it tried to insert by an alias
    (``INSERT ... VALUES (...) AS inserted_row ON DUPLICATE KEY UPDATE c = inserted_row.c``)
    instead of ``VALUES(c)``: MySQL from 8.0.19 (see vendor_sql.upsert_clause).

    Why: MySQL 8.0.20 deprecated ``VALUES(c)`` there; every such statement leaves
    warning 1287 ("will be removed in a future release"). MariaDB has no row alias and
    keeps ``VALUES(c)``, as Django's own upserts do."""
    return (conn.vendor == "mysql" and not is_mariadb(conn)
            and cast("MySQLDatabaseWrapper", conn).mysql_version >= (8, 0, 19))


def is_mariadb(conn: BaseDatabaseWrapper) -> bool:
    """Whether ``conn`` is Django's MySQL backend on a MariaDB server: the two share the
    vendor ``mysql`` and differ in some SQL (see sql_dialect)."""
    return conn.vendor == "mysql" and cast("MySQLDatabaseWrapper", conn).mysql_is_mariadb


def copies_task_records(db: str) -> bool:
    """Whether a finished task's record on database ``db`` can be copied by the server
    from its message's row (djqueue.storage.statements.task_record_copy), so that what
    a record's JSON columns read back is what they would read back had Python written
    them:

    - PostgreSQL and MySQL keep JSON columns parsed (``jsonb``; MySQL's binary JSON,
      which sorts object keys and stores a number too large for 64 bits as a double):
      a value parsed from the message's text there is the one the same value written
      from Python becomes;
    - MariaDB keeps them as text, and its ``JSON_EXTRACT`` gives a value's text as the
      document has it (keys in their order, numbers as written; only the spacing
      differs);
    - SQLite's ``json_extract`` gives an array's or object's text with its numbers
      and escapes as the document has them.

    On MySQL and MariaDB only on the fast path (:func:`writes_values_into_sql`): the
    copy carries the runs' values escaped into its text."""
    vendor = vendor_of(db)
    return vendor in ("postgresql", "sqlite") or writes_values_into_sql(vendor)


def escapes_client_side(conn: BaseDatabaseWrapper) -> Callable[[object], str] | None:
    """On MySQL/MariaDB, the driver's escaping of one value into SQL text with ``%``
    doubled, for a statement that has parameters too; elsewhere None.

    Why: mysqlclient interpolates every parameter into the statement text with
    that same escaping, so the values a batch's rows share are escaped once
    (see fastpath.driver_literal)."""
    literal = literal_client_side(conn)
    return None if literal is None else lambda value: literal(value).replace("%", "%%")


def writes_values_into_sql(vendor: str) -> bool:
    """Whether hot-path statements on a ``vendor`` database (a connection's
    ``.vendor``) carry their values escaped into their text by the driver
    (MySQL/MariaDB, on the fast path: see fastpath.driver_literal); otherwise every
    value is a parameter. Takes the vendor, not a connection, so that a caller holding
    only an alias asks it too (:func:`copies_task_records`)."""
    return vendor == "mysql" and fastpath.verified.enabled


def literal_client_side(conn: BaseDatabaseWrapper) -> Callable[[object], str] | None:
    """On MySQL/MariaDB, the driver's escaping of one value into SQL text, for a
    statement run without parameters (see fastpath.driver_literal); elsewhere None."""
    return fastpath.driver_literal(conn)


def claim_index_hint(conn: BaseDatabaseWrapper) -> str:
    """`` FORCE INDEX (djqueue_msg_claim)`` on MySQL/MariaDB, else nothing.

    Why: on a small or freshly emptied table the optimizer may prefer another
    index and a filesort; a locking read then locks every ready row of the
    queue before LIMIT applies, and concurrent workers skip them all and find
    nothing. Forcing djqueue_msg_claim reads and locks only the rows returned.
    Django cannot say FORCE INDEX, so the compiled claim query is amended with
    it: the SQL text comes from the compiler alone, every value stays a parameter.
    """
    if conn.vendor != "mysql":
        return ""
    return f" FORCE INDEX ({conn.ops.quote_name(CLAIM_INDEX)})"


def primary_key_hint(conn: BaseDatabaseWrapper) -> str:
    """`` FORCE INDEX (PRIMARY)`` on MySQL/MariaDB, else nothing: for a locking read of
    messages by id that also tests their state.

    Why: with ``state = 3`` in the WHERE clause the optimizer may pick the
    (state, visible_at) index when few messages are claimed, and a locking read
    through it locks every claimed message, other workers' included.
    """
    return " FORCE INDEX (PRIMARY)" if conn.vendor == "mysql" else ""


def is_deadlock(exc: BaseException) -> bool:
    """Whether the database chose this transaction as a deadlock victim (and rolled it back)."""
    if getattr(exc, "args", None) and exc.args[0] == 1213:  # MySQL ER_LOCK_DEADLOCK
        return True
    return getattr(exc.__cause__, "sqlstate", None) == "40P01"  # PostgreSQL deadlock_detected


def retry_deadlocks(work: Callable[[], T]) -> T:
    """Run the transaction ``work`` again if it was chosen as a deadlock victim.

    Why: InnoDB locks the record after each range of a primary-key IN list
    while it checks where the range ends, so two transactions acking or
    deleting disjoint id lists can still lock each other's neighbours and
    deadlock. The victim's whole transaction is rolled back, so running it
    again is safe — unless it is part of an outer transaction, which only the
    caller can repeat.
    """
    for attempt in range(DEADLOCK_RETRIES):
        try:
            return work()
        except OperationalError as exc:
            if (connection().in_atomic_block or not is_deadlock(exc)
                    or attempt == DEADLOCK_RETRIES - 1):
                raise
            time.sleep(random.uniform(0.001, 0.01) * (2 ** attempt))
    raise AssertionError("unreachable")
