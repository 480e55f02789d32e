"""The layout of partitioned queues: creating one, adding and removing partitions, and
the reaper's step that takes an emptied draining partition off its queue.

The layout lives in the directory row on the home database (its ``partitions`` and
``draining_partitions``), changed under that row's lock; how sends and claims use
it is djqueue.storage.partitions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence

from django.db import DatabaseError, transaction

from djqueue.exceptions import ConfigurationError, shown_value
from djqueue.models import Message, Queue, State
from djqueue.storage import placement
from djqueue.storage.partitions import active_partitions, unreachable
from djqueue.storage.queue_lookup import (
    create_queue,
    forget,
    get_queue,
    get_queue_on,
    working_rows,
)


def create_partitioned(name: str, databases: Sequence[str], *, exist_ok: bool = False,
                       **options: object) -> Queue:
    """Create queue ``name`` partitioned over ``databases``: its directory row on the home
    database and its row, with ``options``, on each partition."""
    databases = _checked(name, databases)
    if isinstance(dead_letter_queue := options.get("dead_letter_queue"), Queue):
        options["dead_letter_queue"] = dead_letter_queue.name
    home = placement.home()
    existing = working_rows(home).filter(name=name).first()
    if existing is not None and not exist_ok:
        raise ConfigurationError(f"Invalid queue {name!r}: a queue of this name already "
                                 f"exists (on database {home!r}).")
    if existing is not None and existing.partitions is None:
        raise ConfigurationError(f"Queue {name!r} exists and is not partitioned.")
    for db in databases:
        if db != home:
            create_queue(name, exist_ok=True, database=db, partition=True, **options)
    if existing is None:
        existing = create_queue(name, exist_ok=True, database=home, partition=True, **options)
        Queue.objects.using(home).filter(pk=existing.pk).update(partitions=databases)
        existing.partitions = databases
    forget(name)
    return existing


def add_partition(name: str, db: str) -> Queue:
    """Spread queue ``name`` over database ``db`` too; it takes new messages at once (and
    keys hash over one more partition from then on)."""
    _check_alias(name, db)
    directory = _directory(name)
    current = active_partitions(directory)
    if db in current:
        return directory
    _checked(name, [*current, db])
    source = get_queue_on(name, current[0])
    options = {f.name: getattr(source, f.name) for f in Queue._meta.concrete_fields
               if f.editable and f.name not in {"id", "name", "dead_letter_queue"}}
    if source.dead_letter_queue is not None:  # partitioned over the same databases
        options["dead_letter_queue"] = source.dead_letter_queue.name
    create_queue(name, exist_ok=True, database=db, partition=True, **options)
    return _change(name, lambda active, draining: (
        [*active, db], _without(draining, db)))


def remove_partition(name: str, db: str) -> Queue:
    """Send queue ``name`` nothing more on database ``db``; its messages there are still
    served, and the reaper drops it from the layout once it is empty."""
    _check_alias(name, db)
    directory = _directory(name)
    current = active_partitions(directory)
    if db not in current:
        return directory
    if len(current) == 1:
        raise ConfigurationError(f"Queue {name!r} keeps at least one partition.")
    return _change(name, lambda active, draining: (
        _without(active, db), [*draining, db]))


def drop_drained() -> int:
    """The reaper's step: take every emptied draining partition off its queue's layout."""
    dropped = 0
    home = placement.home()
    for directory in working_rows(home).exclude(draining_partitions=[]).filter(
            partitions__isnull=False):
        for db in list(directory.draining_partitions):
            try:
                row = get_queue_on(directory.name, db)
                pending = Message.objects.using(db).filter(
                    queue=row, state__in=[State.READY, State.SCHEDULED, State.CLAIMED,
                                          State.WAITING]).exists()
            except DatabaseError as exc:
                if not unreachable(exc):
                    raise
                continue
            if not pending:
                _change(directory.name, functools.partial(_without_draining, db))
                dropped += 1
    return dropped


def _directory(name: str) -> Queue:
    directory = get_queue(name, fresh=True)
    active_partitions(directory)  # raises for a queue that is not partitioned
    return directory


def _without(databases: list[str], db: str) -> list[str]:
    return [d for d in databases if d != db]


def _without_draining(db: str, active: list[str], draining: list[str],
                      ) -> tuple[list[str], list[str]]:
    return active, _without(draining, db)


def _change(name: str, change: Callable[[list[str], list[str]],
                                          tuple[list[str], list[str]]]) -> Queue:
    home = placement.home()
    with transaction.atomic(using=home):
        directory = working_rows(home).select_for_update().get(name=name)
        active, draining = change(active_partitions(directory), list(
            directory.draining_partitions or []))
        directory.partitions, directory.draining_partitions = active, draining
        directory.save(using=home, update_fields=["partitions", "draining_partitions"])
    forget(name)
    return directory


def _check_alias(name: str, db: object) -> None:
    if not isinstance(db, str):
        raise ConfigurationError(f"Queue {name!r}: a partition is a database alias, not "
                                 f"{shown_value(db)}.")


def _checked(name: str, databases: Sequence[str]) -> list[str]:
    if isinstance(databases, str | bytes) or not isinstance(databases, Iterable):
        raise ConfigurationError(f"Queue {name!r}: partitions are a list of database "
                                 f"aliases, not {shown_value(databases)}.")
    databases = list(databases)
    if len(databases) < 1 or not all(isinstance(db, str) for db in databases) or len(
            set(databases)) != len(databases):
        raise ConfigurationError(f"Queue {name!r}: partitions are different database "
                                 f"aliases, got {shown_value(databases)}.")
    unknown = [db for db in databases if db not in placement.databases()]
    if unknown:
        raise ConfigurationError(
            f"Queue {name!r}: {', '.join(unknown)} is not a database djqueue keeps queues on "
            f"({', '.join(placement.databases())}); name it in DJQUEUE['QUEUE_DATABASES'].")
    return databases
