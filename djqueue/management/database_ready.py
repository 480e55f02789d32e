"""The base of djqueue's commands: each starts once its database answers and holds
djqueue's migrations, and otherwise says which it lacks in one line.

- **A database that does not answer.** A long-running process (a worker, a reaper, the
  API and metrics servers) started beside its database, as a container often is,
  waits for it, saying so, and tries again (after 1, 2, 4, 8, then every 15 s), as
  Celery's worker waits for its broker. A one-off command (``djqueue_queues``,
  ``djqueue_reaper --once``), and any on SQLite (a file that cannot be opened will not
  open later), fails at once with the database's error in one line.
  Before, both failed with a traceback from Django's system checks or their first
  statement. A server that answers and refuses the connection's user, password or
  database name fails every command at once, saying so: waiting would not mend it.
- **Migrations not applied** (djqueue.storage.migration_state says why it matters):
  the command fails, naming the migrations and the ``migrate`` command that applies
  them.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, OperationalError, connections

from djqueue.conf import get_settings
from djqueue.storage import connection_refusals, migration_state, placement

logger = logging.getLogger("djqueue")

#: Migrations named in full up to this many; past it, the first and the last.
NAMED = 3
#: Seconds between a waiting command's tries: these, then the last one over again.
RETRY_STEPS = (1, 2, 4, 8, 15)


class DatabaseReadyCommand(BaseCommand):
    """A command that reads or writes djqueue's tables: before Django's system checks
    (which read the server's version on MySQL) and its own work, its home database
    must answer, and each database it uses (the home one, those queues are placed on)
    must hold djqueue's migrations."""

    def waits_for_database(self, options: dict[str, Any]) -> bool:
        """Whether this run waits for a database that does not answer (a long-running
        process), or fails at once (a one-off command)."""
        return False

    def execute(self, *args: Any, **options: Any) -> str | None:
        command = type(self).__module__.rpartition(".")[2]
        reach_home_database(command, wait=self.waits_for_database(options))
        require_migrated()
        return super().execute(*args, **options)


def reach_home_database(command: str, *, wait: bool) -> None:
    """Return once the home database answers a connection; CommandError with its error
    if it does not and ``wait`` is False (or on Ctrl-C while waiting)."""
    db = get_settings().DATABASE
    if db not in settings.DATABASES:
        return  # the system checks say so (djqueue.E002)
    for attempt in itertools.count():
        probe = connection_refusals.probe_connection(db)
        try:
            with probe.cursor():
                return
        except OperationalError as exc:
            error = " ".join(str(exc).split())
            refused = connection_refusals.is_refused(exc)
        finally:
            if probe is not connections[db]:  # under Django's pool: a connection of its own
                probe.close()
        connections[db].close()
        if refused:  # its user, password or name: waiting mends nothing
            raise CommandError(f"Database {db!r} refuses the connection: {error}. Check "
                               f"DATABASES[{db!r}]: its USER, PASSWORD and NAME.")
        if not wait or connections[db].vendor == "sqlite":  # a file: waiting mends nothing
            raise CommandError(f"Database {db!r} does not answer: {error}")
        pause = RETRY_STEPS[min(attempt, len(RETRY_STEPS) - 1)]
        logger.warning("%s: database %r does not answer; trying again in %d s: %s",
                       command, db, pause, error, extra={"database": db})
        try:
            time.sleep(pause)
        except KeyboardInterrupt:
            raise CommandError(f"Stopped before database {db!r} answered.") from None


def require_migrated() -> None:
    """CommandError naming each database with djqueue migrations to apply. A database
    that is not configured (the system checks say so) or does not answer (a partition
    server may be down; the command passes it over as it would have) is passed over."""
    problems = []
    for db in placement.databases():
        if db not in settings.DATABASES:
            continue
        try:
            missing = migration_state.unapplied(db)
        except DatabaseError:
            continue
        if missing:
            problems.append(_unmigrated(db, missing))
    if problems:
        raise CommandError("\n".join(problems))


def _unmigrated(db: str, missing: list[str]) -> str:
    named = ", ".join(missing) if len(missing) <= NAMED else f"{missing[0]} through {missing[-1]}"
    run = "python manage.py migrate" + ("" if db == "default" else f" --database {db}")
    return (f"djqueue's tables on database {db!r} are not up to date: {len(missing)} "
            f"migration{'s' if len(missing) > 1 else ''} to apply ({named}). Run `{run}` "
            "first.")
