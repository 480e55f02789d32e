"""Where each queue lives: the database alias of its row and everything of it.

A queue lives on one database (an alias of Django's ``DATABASES``): the home
database ``DJQUEUE["DATABASE"]``, unless a rule of ``DJQUEUE["QUEUE_DATABASES"]``
places it elsewhere or it was created with ``create_queue(name, database=alias)``.
Its messages, history, groups, limiters, statistics, trace, task records and
workflows live there with it, so every state change of a message stays one
short transaction on one server; the worker and reaper rows of the processes
serving it are written there too, so each database holds all that its reaper
needs to bring a dead worker's claims back. Nothing of a queue placed elsewhere
is written to the home database.

Finding a queue by name: a rule names its database at once; otherwise the name is
looked for on the home database, then on the others (``databases()``), and where it
was found is remembered until the queue is deleted. With one database (the usual
set-up) that is the one query it always was.
"""

from __future__ import annotations

import threading

from django.db import connections, models

from djqueue.conf import get_settings
from djqueue.exceptions import ConfigurationError
from djqueue.storage import dialects

#: Queue name -> the database it was found on (by a search, not a rule).
_found: dict[str, str] = {}
_found_lock = threading.Lock()


def home() -> str:
    """The home database: djqueue's tables for every queue not placed elsewhere."""
    return get_settings().DATABASE


def databases() -> tuple[str, ...]:
    """Every database djqueue keeps queues on: the home one first, then each alias the
    rules name, in their order."""
    settings = get_settings()
    found = [settings.DATABASE]
    for ruled_to in settings.QUEUE_DATABASES.values():
        for db in ([ruled_to] if isinstance(ruled_to, str) else ruled_to):
            if db not in found:
                found.append(db)
    return tuple(found)


def rule(name: str) -> str | tuple[str, ...] | None:
    """What the rule of QUEUE_DATABASES that matches queue ``name`` names: a database, the
    databases it is partitioned over, or None.

    A rule is a queue's name or a pattern ending in ``*`` (a prefix); an exact name
    wins over patterns, and a longer prefix over a shorter one.
    """
    rules = get_settings().QUEUE_DATABASES
    if not rules:
        return None
    found = rules.get(name)
    if found is None:
        best = -1
        for pattern, ruled_to in rules.items():
            if pattern.endswith("*") and name.startswith(pattern[:-1]) and len(pattern) > best:
                best, found = len(pattern), ruled_to
    return found if found is None or isinstance(found, str) else tuple(found)


def read_database(db: str) -> str:
    """Where pages and reports read database ``db``'s rows: its read replica
    (``DJQUEUE["READ_DATABASE"]``, for the home database), else ``db`` itself."""
    replica = get_settings().READ_DATABASE
    return replica if replica is not None and db == home() else db


def replica_lag(db: str) -> float | None:
    """Seconds database ``db`` (a read replica) is behind its primary; None when it is not
    replicating (stopped, broken, or not a replica), or the vendor cannot tell.

    Why per vendor: MariaDB/MySQL report it in ``SHOW SLAVE STATUS``
    (``Seconds_Behind_Master``, NULL while its threads are stopped); PostgreSQL gives the
    time of the last transaction replayed, and the lag is now minus that (an idle
    primary makes it grow; ``pg_last_xact_replay_timestamp`` is NULL on a primary).
    """
    conn = connections[db]
    with conn.cursor() as cursor:
        if conn.vendor == "mysql":
            cursor.execute("SHOW SLAVE STATUS")
            row = cursor.fetchone()
            if row is None:
                return None
            names = [c[0] for c in cursor.description]
            value = dict(zip(names, row, strict=True)).get("Seconds_Behind_Master")
            return None if value is None else float(value)
        if conn.vendor == "postgresql":
            cursor.execute("SELECT CASE WHEN pg_is_in_recovery() THEN EXTRACT(EPOCH FROM "
                           "now() - pg_last_xact_replay_timestamp()) END")
            value = cursor.fetchone()[0]
            return None if value is None else max(float(value), 0.0)
    return None


def ruled(name: str) -> str | None:
    """The one database a rule places queue ``name`` on (None: no rule, or partitions)."""
    found = rule(name)
    return found if isinstance(found, str) else None


def ruled_partitions(name: str) -> tuple[str, ...] | None:
    """The databases a rule partitions queue ``name`` over, or None."""
    found = rule(name)
    return found if isinstance(found, tuple) else None


def candidates(name: str) -> tuple[str, ...]:
    """The databases to look for queue ``name`` on, in order: its rule's alone (the home
    one for a partitioned queue, which keeps its directory row); else where it was
    found before; else the home database, then the others."""
    if ruled_partitions(name) is not None:
        return (home(),)
    db = ruled(name) or _found.get(name)
    if db is not None:
        return (db,)
    return databases()


def creation_database(name: str, database: str | None) -> str:
    """The database a new queue ``name`` is created on: ``database`` if given (it must be
    one of ``databases()`` and agree with any rule), else its rule's, else home."""
    if ruled_partitions(name) is not None:
        if database is not None:
            raise ConfigurationError(f"Queue {name!r} is partitioned by DJQUEUE["
                                     f"'QUEUE_DATABASES']; it takes no database=.")
        return home()
    rule = ruled(name)
    if database is None:
        return rule or home()
    if database not in databases():
        raise ConfigurationError(
            f"Queue {name!r}: database {database!r} is not one djqueue keeps queues on "
            f"({', '.join(databases())}); name it in DJQUEUE['QUEUE_DATABASES'].")
    if rule is not None and rule != database:
        raise ConfigurationError(
            f"Queue {name!r}: DJQUEUE['QUEUE_DATABASES'] places it on {rule!r}, "
            f"not {database!r}.")
    return database


def remember(name: str, db: str) -> None:
    if len(databases()) > 1 and ruled(name) is None:
        with _found_lock:
            _found[name] = db


def forget(name: str | None = None) -> None:
    """Forget where queue ``name`` (or every queue) was found."""
    with _found_lock:
        if name is None:
            _found.clear()
        else:
            _found.pop(name, None)


def database_of(instance: models.Model) -> str:
    """The database a row (a queue, a message) was read from, or the current one."""
    return instance._state.db or dialects.alias()
