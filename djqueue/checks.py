"""System checks. Ids are stable and listed in docs/checks.md."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections
from django.utils.module_loading import import_string

from djqueue.conf import get_settings
from djqueue.exceptions import ConfigurationError
from djqueue.maintenance.periodic import schedules
from djqueue.storage import placement
from djqueue.worker import registry


@register("djqueue")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        settings = get_settings()
    except (ConfigurationError, TypeError) as exc:
        return [Error(str(exc), id="djqueue.E001", hint="See docs/settings.md.")]
    found: list[CheckMessage] = []
    if settings.DATABASE not in connections.settings:
        return [Error(f"DJQUEUE['DATABASE'] names the unknown alias {settings.DATABASE!r}.",
                      id="djqueue.E002")]
    for queue in registry.configured_paths():
        try:
            registry.resolve(queue)
        except ConfigurationError as exc:  # HandlerNotFound, or its options
            found.append(Error(str(exc), id="djqueue.E003"))
    for alias in placement.databases():
        found.extend(_check_database(alias))
    found.extend(_check_periodic())
    return found


def _check_periodic() -> list[CheckMessage]:
    try:
        entries = schedules()
    except ConfigurationError as exc:
        return [Error(str(exc), id="djqueue.E006")]
    found: list[CheckMessage] = []
    for entry in entries:
        try:
            import_string(entry.task_path)
        except ImportError as exc:
            found.append(Error(f"PERIODIC[{entry.name!r}] task does not import: {exc}",
                               id="djqueue.E006"))
    return found


def _check_database(alias: str) -> list[CheckMessage]:
    conn = connections[alias]
    found: list[CheckMessage] = []
    options = conn.settings_dict.get("OPTIONS", {})
    if conn.vendor == "mysql":
        level = (options.get("isolation_level") or "read committed").lower()
        if level != "read committed":
            found.append(Warning(
                f"Database {alias!r} uses isolation level {level!r}; djqueue switches each claim "
                "to READ COMMITTED with an extra statement.",
                hint="Set OPTIONS['isolation_level'] = 'read committed'.", id="djqueue.W001"))
    elif conn.vendor == "sqlite":
        if (options.get("transaction_mode") or "").upper() != "IMMEDIATE":
            found.append(Warning(
                f"SQLite database {alias!r} starts transactions DEFERRED; concurrent workers will "
                "hit 'database is locked'.",
                hint="Set OPTIONS['transaction_mode'] = 'IMMEDIATE' (and a 'timeout').",
                id="djqueue.W002"))
    elif conn.vendor != "postgresql":
        found.append(Error(f"djqueue does not support the {conn.vendor!r} database backend.",
                           id="djqueue.E004"))
    return found


@register("djqueue", Tags.database)
def check_database_features(app_configs: Any = None, databases: Any = None,
                            **kwargs: Any) -> list[CheckMessage]:
    """Runs with ``check --database`` and before ``migrate``: it connects to the server."""
    try:
        aliases = placement.databases()
    except (ConfigurationError, TypeError):
        return []  # reported as djqueue.E001
    found: list[CheckMessage] = []
    for alias in aliases:
        if databases and alias in databases:
            found.extend(_check_features(alias))
    return found


def _check_features(alias: str) -> list[CheckMessage]:
    conn = connections[alias]
    if conn.vendor == "mysql" and not conn.features.has_select_for_update_skip_locked:
        return [Error(f"Database {alias!r} does not support SELECT ... FOR UPDATE SKIP LOCKED.",
                      hint="djqueue needs MariaDB >= 10.6 or MySQL >= 8.0.1.", id="djqueue.E005")]
    if conn.vendor == "postgresql":
        return _check_autovacuum(alias)
    return []


def _check_autovacuum(alias: str) -> list[CheckMessage]:
    """Every claim and ack leaves a dead row on PostgreSQL; without vacuums the queue's
    table and indexes grow and drains slow down (djqueue.maintenance.vacuuming)."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT name, setting FROM pg_settings "
                       "WHERE name IN ('autovacuum', 'track_counts')")
        found = dict(cursor.fetchall())
    if found.get("autovacuum") == "on" and found.get("track_counts") == "on":
        return []
    reaper = ("the reaper vacuums djqueue's busiest tables when their dead rows reach "
              "DJQUEUE['VACUUM_DEAD_ROWS']" if get_settings().VACUUM_DEAD_ROWS is not None
              and found.get("track_counts") == "on" else
              "nothing vacuums djqueue's tables (track_counts off, or VACUUM_DEAD_ROWS None)")
    return [Warning(
        f"PostgreSQL database {alias!r} runs with autovacuum {found.get('autovacuum')} and "
        f"track_counts {found.get('track_counts')}: every ack leaves a dead row, and "
        f"{reaper}.",
        hint="Turn autovacuum on (the default); migration 0014 tunes it for djqueue's "
             "tables. Keep a reaper running.", id="djqueue.W003")]
