"""Whether djqueue's migrations are applied on a database.

Every djqueue command reads or writes djqueue's tables. On a database where
``migrate`` was never run, or not run again after an upgrade added a migration, it
would fail at its first statement with a traceback about a missing table or column,
and a worker under a process manager would do so again at each restart. So the
commands ask here first, and refuse to start with one line naming the database, the
migrations missing and the command that applies them
(djqueue.management.database_ready).

Django's own answer is read, as ``runserver``'s warning and ``migrate --check`` read
it: the plan ``MigrationExecutor`` makes to reach djqueue's newest migration. That
class is not in Django's documented API; it is what Django's commands use, and the
documented way, ``call_command("migrate", check=True)``, ends the process and speaks
of every app. It costs one read of ``django_migrations`` and the loading of the
project's migration files (docs/operations.md has the time), once per database a
process.
"""

from __future__ import annotations

from django.db import connections
from django.db.migrations.executor import MigrationExecutor

#: Databases found migrated in this process: not read again.
_migrated: set[str] = set()


def unapplied(db: str) -> list[str]:
    """The migrations (``app.name``) that ``migrate`` would apply on database ``db`` to
    bring djqueue's tables up to date, in order; [] when they are. A database that
    does not answer raises its DatabaseError."""
    if db in _migrated:
        return []
    executor = MigrationExecutor(connections[db])
    targets = executor.loader.graph.leaf_nodes("djqueue")
    missing = [f"{migration.app_label}.{migration.name}"
               for migration, backwards in executor.migration_plan(targets) if not backwards]
    if not missing:
        _migrated.add(db)
    return missing
