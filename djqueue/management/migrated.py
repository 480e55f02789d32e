"""The base of djqueue's commands: none starts on a database whose djqueue migrations
are not all applied (djqueue.storage.migration_state says why)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from djqueue.storage import migration_state, placement

#: Migrations named in full up to this many; past it, the first and the last.
NAMED = 3


class MigratedCommand(BaseCommand):
    """A command that reads or writes djqueue's tables: before its own work, it checks
    that they are migrated on each database it uses (the home one, and those queues are
    placed on), and otherwise fails with the ``migrate`` command that mends it."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        require_migrated()
        return super().execute(*args, **options)


def require_migrated() -> None:
    """CommandError naming each database with djqueue migrations to apply. A database
    that is not configured (the system checks say so) or does not answer (the command
    says so as it would have) is passed over."""
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
