"""Every use of Django's or a driver's private internals, each with its reason.

The hot path (send, claim, ack, the django.tasks worker) skips work the ORM
does per call or per row where a queue pays it per message. Each shortcut here
has a plain path that uses only public APIs and gives the same result; the
equality of the two is checked by tests/storage/test_fastpath.py on every
database. On a Django version the shortcuts were not verified with, djqueue
logs a warning once and takes the plain paths: slower, never wrong.
(What the shortcuts save is measured on the docs site's performance page.)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from json import encoder as _json_encoder
from typing import Any, TypeVar

import django
from django.db import DatabaseError, IntegrityError, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.dispatch import Signal
from django.utils.asyncio import async_unsafe

logger = logging.getLogger("djqueue")
M = TypeVar("M", bound=models.Model)

#: The Django feature releases whose internals these shortcuts were checked against.
VERIFIED_DJANGO = ((5, 2), (6, 0), (6, 1))

enabled = django.VERSION[:2] in VERIFIED_DJANGO
if not enabled:
    logger.warning("djqueue's fast paths were not verified with Django %s; using the plain "
                   "ORM paths instead (correct, slower).", django.get_version())


# Model instances

def builder(model: type[M], **shared: object) -> Callable[..., M]:
    """A maker of unsaved instances that all have the ``shared`` values, as ``model(**)``.

    Why: ``Model.__init__`` walks every field per instance; a send builds one
    message per payload, a thousand per ``send_batch``. The shortcut fills the
    instance's ``__dict__`` with the defaults merged once, and a new ``ModelState``.
    Plain path: ``model(**shared, **values)`` (also used while pre/post_init
    receivers exist, which ``__init__`` must call)."""
    if not enabled or ((pre_init.receivers or post_init.receivers) and (
            pre_init.has_listeners(model) or post_init.has_listeners(model))):
        return functools.partial(model, **shared) if shared else model
    if not shared:
        return _maker(model)
    static, called = _defaults(model)
    return _make(model, {**static, **shared}, [(n, f) for n, f in called if n not in shared])


@functools.cache
def _maker(model: type[M]) -> Callable[..., M]:
    """A model's maker without shared values: made once (a task run builds its record
    with one)."""
    return _make(model, *_defaults(model))


def _make(model: type[M], base: dict[str, object],
          called: list[tuple[str, models.Field]]) -> Callable[..., M]:
    new = model.__new__

    def make(**values: object) -> M:
        instance = new(model)
        fields = instance.__dict__
        fields.update(base)
        for name, field in called:
            if name not in values:
                fields[name] = field.get_default()
        fields.update(values)
        instance._state = ModelState()
        return instance

    return make


@functools.cache
def _defaults(model: type[models.Model]) -> tuple[dict[str, object], list[tuple[str, models.Field]]]:
    """A model's constant defaults, and the fields whose default is called each time
    (callables, and mutable values such as a JSONField's ``default=list``)."""
    static, called = {}, []
    for field in model._meta.concrete_fields:
        if field.has_default() and (callable(field.default) or isinstance(
                field.default, list | dict | set)):
            called.append((field.attname, field))
        else:
            static[field.attname] = field.get_default()
    return static, called


def from_rows(model: type[M], db: str, attnames: Sequence[str],
              rows: Sequence[Sequence[object]]) -> list[M]:
    """Instances of rows already converted to Python values, as ``Model.from_db``.

    Why: ``from_db`` calls ``__init__``, which cost more than the claim's statements
    for a batch of 100. Plain path: ``from_db`` (also with pre/post_init receivers)."""
    if not enabled or pre_init.has_listeners(model) or post_init.has_listeners(model):
        return [model.from_db(db, attnames, values) for values in rows]
    instances = []
    new = model.__new__
    for values in rows:
        instance = new(model)
        instance.__dict__.update(zip(attnames, values, strict=True))
        state = instance._state = ModelState()
        state.adding, state.db = False, db
        instances.append(instance)
    return instances


def mark_saved(instance: models.Model, pk: object, db: str) -> None:
    """Record that ``instance`` was inserted as ``pk`` on ``db``, as ``save()`` would
    (``_state`` is documented: Model._state.adding and .db)."""
    instance.__dict__[instance._meta.pk.attname] = pk
    state = instance._state
    state.adding, state.db = False, db


def mark_unsaved(instance: models.Model) -> None:
    """Undo :func:`mark_saved` for an insert whose transaction rolled back (a retry
    after a deadlock inserts it again)."""
    instance.pk = None
    instance._state.adding = True


def database_of(instance: models.Model) -> str | None:
    """The alias ``instance`` was read from or saved to (Model._state.db)."""
    return instance._state.db


def related_cacher(model: type[models.Model], field_name: str) -> Callable[[Any, Any], None]:
    """A setter of a foreign key's cached object, as reading the key would leave it.

    Why: assigning through the descriptor also checks the value's type and the
    database router, per message. Plain path: the assignment."""
    if not enabled:
        return lambda instance, value: setattr(instance, field_name, value)
    return model._meta.get_field(field_name).set_cached_value


# Statements

def with_index_hint(query: models.QuerySet, table: str, hint: str) -> models.QuerySet | list:
    """The rows of ``query`` with ``hint`` (e.g. FORCE INDEX) after its table name.

    Why: the ORM has no way to name an index, and MariaDB may choose another for
    a conditional claim, scanning and locking far more rows. The compiled SQL
    gets the hint after its ``FROM`` and is run raw. Plain path: the query as is."""
    if not enabled or not hint:
        return query
    sql, params = query.query.get_compiler(using=query.db).as_sql()
    source = f"FROM {table}"
    if source not in sql:
        raise AssertionError(f"Unexpected claim SQL: {sql}")
    return list(query.model.objects.using(query.db).raw(
        sql.replace(source, f"{source}{hint}", 1), params))


def _straight_to_driver(conn: BaseDatabaseWrapper) -> bool:
    """Whether a statement may skip ``connection.cursor()``'s layers: nothing observes
    queries (no ``execute_wrapper``, no query logging). Then the checks ``cursor()``
    makes are made here, and the caller translates errors as its cursor would."""
    if not enabled or conn.execute_wrappers or conn.queries_logged:
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
        except conn.Database.OperationalError as exc:
            # As the MySQL backend's cursor does: these codes are integrity errors.
            from django.db.backends.mysql.base import (
                CursorWrapper,
            )

            if exc.args[0] in CursorWrapper.codes_for_integrityerror:
                raise IntegrityError(*exc.args) from exc
            raise
        return driver.insert_id()


@async_unsafe
def insert_returning_id(conn: BaseDatabaseWrapper, sql: str, params: Sequence[object]) -> int:
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


def _driver_cursor(conn: BaseDatabaseWrapper) -> Any:
    """psycopg's own cursor on ``conn``'s connection, made once for each connection.

    Why: a psycopg cursor copies its connection's adapters when made, which Django's
    many adapters made 40 % of a single insert's CPU (50 of 124 µs). One is kept on
    Django's connection object for as long as the driver's connection lives; a
    cursor is not tied to a transaction, and Django's connection serves one thread
    (one shared between threads gets a new cursor each time)."""
    driver = conn.connection
    if conn.allow_thread_sharing:
        return conn.Database.Cursor(driver)
    kept = conn.__dict__.get("_djqueue_driver_cursor")
    if kept is None or kept[0] is not driver or kept[1].closed:
        kept = conn.__dict__["_djqueue_driver_cursor"] = (driver, conn.Database.Cursor(driver))
    return kept[1]


@async_unsafe
def insert_lastrowid(conn: BaseDatabaseWrapper, sql: str, params: Sequence[object]) -> int:
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
    if not enabled or conn.vendor != "mysql":
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
    if not enabled:
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


# Values

def unsupported(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_encoder(plain: json.JSONEncoder) -> Callable[[Any], str]:
    """``plain.encode``, with its C encoder built once.

    Why: ``JSONEncoder.encode`` builds its C encoder (``c_make_encoder``) anew on
    every call, two thirds of the time a ~100-byte payload takes, and
    ``send_batch`` encodes a thousand per call. It is built without the
    circular-reference bookkeeping (a dict shared by every caller could not tell
    two threads encoding one payload from a cycle): a value that contains itself
    raises RecursionError instead of ValueError. Plain path: ``plain.encode``."""
    make_encoder = getattr(_json_encoder, "c_make_encoder", None)
    if not enabled or make_encoder is None or plain.indent is not None:
        return plain.encode
    escape = (_json_encoder.encode_basestring_ascii if plain.ensure_ascii
              else _json_encoder.encode_basestring)
    encode_chunks = make_encoder(None, unsupported, escape, None, plain.key_separator,
                                 plain.item_separator, plain.sort_keys, plain.skipkeys,
                                 plain.allow_nan)

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return plain.encode(value)
        return "".join(encode_chunks(value, 0))

    return encode


def frozen_dataclass(cls: type, values: dict[str, object]) -> Any:
    """An instance of the frozen dataclass ``cls`` with ``values`` (every field, init or
    not), without ``__init__``; callers check :data:`enabled` first.

    Why: TaskResult's ``__post_init__`` normalises args and kwargs, a tenth of a
    task's time in a worker for two results a run, and changes nothing for
    values decoded from JSON. Plain path (the caller's): the constructor."""
    instance = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(instance, name, value)
    return instance


# Signals

def receivers_among(signal: Signal, sender: object, known: tuple[Callable, ...]) -> bool:
    """Whether every receiver ``signal`` would call for ``sender`` is one of ``known``.

    Why: Django's public API tells only whether a signal has receivers at all. A
    django.tasks worker sends ``task_started`` and ``task_finished`` for every run,
    and where only the framework's own logging receivers would get them and their
    records are held back (djqueue.tasks.task_run_logs), the sends do nothing but
    cost a tenth of a task's time. ``Signal._live_receivers`` (Django 5.0 and later)
    gives the receivers as ``send`` would find them. Plain path: False (the caller
    sends)."""
    if not enabled:
        return False
    synchronous, asynchronous = signal._live_receivers(sender)
    return not asynchronous and all(
        any(receiver is mine for mine in known) for receiver in synchronous)


# Calls

def sync_function(func: Callable[..., Any]) -> Callable[..., Any] | None:
    """``func`` itself when a django.tasks Task of it may be run by calling it, as
    ``Task.call`` does for a function that is not a coroutine function; else None.

    Why: ``Task.call`` asks ``inspect.iscoroutinefunction`` on every run, which is
    the same answer for a task's function each time. Plain path (None, also on
    an unverified Django): ``task.call``."""
    return _sync_function(func) if enabled else None


@functools.lru_cache(maxsize=4096)
def _sync_function(func: Callable[..., Any]) -> Callable[..., Any] | None:
    return None if inspect.iscoroutinefunction(func) else func
