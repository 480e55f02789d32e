"""Finding a queue's row, through a short-lived per-process cache; creating queues.

Every layer above finds queues here, so a queue's row is read once per
QUEUE_CACHE_TTL seconds per process, and a change saved through the ORM
(admin, pause, resume) drops the cached copy at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from djqueue.conf import get_settings
from djqueue.exceptions import ConfigurationError, QueueNotFound, shown_value
from djqueue.models import Queue
from djqueue.models.names import is_valid_name
from djqueue.models.row_checks import check_row
from djqueue.storage import dialects, placement
from djqueue.storage.statements import lookup_statements

QueueRef = str | Queue

_cache: dict[tuple[str, str], tuple[float, Queue]] = {}
_cache_by_id: dict[tuple[str, int], tuple[float, Queue]] = {}
_cache_lock = threading.Lock()


def get_queue(ref: QueueRef, *, fresh: bool = False) -> Queue:
    """The queue named ``ref`` (or ``ref`` itself), read at most QUEUE_CACHE_TTL seconds ago."""
    if isinstance(ref, Queue):
        return ref
    check_ref(ref)
    key = ("", ref)
    now = time.monotonic()
    if not fresh and (cached := _cached(key, now)) is not None:
        return cached
    queue = _find_or_create(ref, placement.candidates(ref))
    if queue is None:
        raise QueueNotFound(ref)
    _keep(key, queue, placement.database_of(queue), now)
    return queue


def check_ref(ref: object) -> None:
    """TypeError unless ``ref`` names a queue (a string) or is one."""
    if not isinstance(ref, str | Queue):
        raise TypeError(
            f"A queue is named by a string or given as a Queue, not {type(ref).__name__}.")


def queue_refs(queues: QueueRef | Iterable[QueueRef]) -> list[QueueRef]:
    """One queue, or an iterable of them, as a list (each checked by check_ref)."""
    if isinstance(queues, str | Queue):
        return [queues]
    if isinstance(queues, bytes | bytearray | dict) or not isinstance(queues, Iterable):
        raise TypeError(f"Queues are a queue's name, a Queue, or a list of those; not "
                        f"{type(queues).__name__}.")
    refs = list(queues)
    for ref in refs:
        check_ref(ref)
    return refs


def get_queues(names: Iterable[str]) -> dict[str, Queue]:
    """The queues named ``names`` by name, as :func:`get_queue` finds each, but those not
    cached are read with one statement per database instead of one each (the HTTP API
    server's poll asks for all its long polls' queues at once). A name with no queue is
    left out (unless AUTO_CREATE_QUEUES creates it, as get_queue would)."""
    now = time.monotonic()
    found: dict[str, Queue] = {}
    unread: dict[str, list[str]] = {}
    for name in set(names):
        if not is_valid_name(name):  # no queue has it (see _find)
            continue
        if (cached := _cached(("", name), now)) is not None:
            found[name] = cached
        else:
            unread.setdefault(placement.candidates(name)[0], []).append(name)
    for db, on_db in unread.items():
        for queue in working_rows(db).filter(name__in=on_db):
            placement.remember(queue.name, db)
            _keep(("", queue.name), queue, placement.database_of(queue), now)
            found[queue.name] = queue
    for name in {n for on_db in unread.values() for n in on_db} - found.keys():
        # Not on its first database, read above: the others (a deleted queue is read once).
        elsewhere = _find_or_create(name, placement.candidates(name)[1:])
        if elsewhere is not None:
            _keep(("", name), elsewhere, placement.database_of(elsewhere), now)
            found[name] = elsewhere
    return found


def _find_or_create(name: str, databases: Iterable[str]) -> Queue | None:
    """Queue ``name``'s row from the first of ``databases`` that holds it; else, with
    AUTO_CREATE_QUEUES, a new queue; else None."""
    queue = _find(name, databases)
    if queue is None and get_settings().AUTO_CREATE_QUEUES:
        queue = create_queue(name, exist_ok=True)
    return queue


def _find(name: str, databases: Iterable[str] | None = None) -> Queue | None:
    """Queue ``name``'s row from the first of ``databases`` (by default, those it may
    live on: see djqueue.storage.placement) that holds it.

    A name no queue may have is not looked for: one that Python holds but no database
    stores (a lone surrogate) failed the driver's encoding instead of being not found."""
    if not is_valid_name(name):
        return None
    for db in placement.candidates(name) if databases is None else databases:
        queue = lookup_statements.queue_named(db, name)
        if queue is not None:
            placement.remember(name, db)
            return queue
    return None


def get_queue_by_id(pk: int, db: str | None = None) -> Queue:
    """The queue with primary key ``pk`` on database ``db`` (default: the current one; ids
    are per database), through the same cache as :func:`get_queue`."""
    db = db or dialects.alias()
    now = time.monotonic()
    hit = _cache_by_id.get((db, pk))
    if hit is not None and now - hit[0] < get_settings().QUEUE_CACHE_TTL:
        return hit[1]
    queue = lookup_statements.queue_with_id(db, pk)
    if queue is None:
        raise Queue.DoesNotExist(f"No queue has id {pk} on database {db!r}.")
    with _cache_lock:
        _cache_by_id[(db, pk)] = (now, queue)
    return queue


def create_queue(name: str, *, exist_ok: bool = False, database: str | None = None,
                 partition: bool = False, **options: Any) -> Queue:
    """Create a queue with validated options; ``dead_letter_queue`` may be a name.

    ``database``: the alias to keep it on (see djqueue.storage.placement); by default
    the one a QUEUE_DATABASES rule names, else the home database. A name is one
    queue: creating it on a second database is refused, except for the rows of a
    partitioned queue (``partition``, from djqueue.storage.partitions; a queue the
    rules partition is created with djqueue.create_queue).
    """
    if not isinstance(name, str):
        raise ConfigurationError(f"A queue's name is a string, not {type(name).__name__}.")
    db, existing = _database_and_row(name, database, partition)
    if existing is not None:
        there = placement.database_of(existing)
        if there != db and (database is not None or placement.ruled(name) is not None):
            raise ConfigurationError(
                f"Queue {name!r} already exists on database {there!r}, not {db!r}.")
        if exist_ok:
            return existing
        raise ConfigurationError(f"Invalid queue {name!r}: a queue of this name already "
                                 f"exists (on database {there!r}).")
    if options.get("dead_letter_queue") is not None:
        options["dead_letter_queue"] = _dead_letter_queue_beside(
            name, options["dead_letter_queue"], db, partition)
    _check_option_names(options)
    queue = Queue(name=name, **options)
    # Why: the check that the dead-letter queue's row exists reads the database the row
    # is on (Django's default router); the name's uniqueness was checked above, on
    # every database (Django's own check would read the default alias only).
    queue._state.db = db
    check_row(queue, f"queue {name!r}", validate_unique=False)
    if exist_ok:
        # Why get_or_create in a savepoint: two processes auto-creating the same
        # queue race on the unique name; the loser reads the winner's row.
        with transaction.atomic(using=db):
            queue, _ = Queue.objects.using(db).get_or_create(
                name=name, defaults={f: getattr(queue, f) for f in _option_names()})
    else:
        queue.save(using=db)
    if not partition:
        placement.remember(name, db)
    return queue


def check_options(name: str, options: dict[str, Any]) -> None:
    """ConfigurationError for any of ``options`` create_queue would refuse a queue
    ``name`` (its ``dead_letter_queue`` aside: create_queue looks that up), for options
    stored now and given to create_queue later (a consumer group's)."""
    _check_option_names(options)
    check_row(Queue(name=name, **{option: value for option, value in options.items()
                                  if option != "dead_letter_queue"}),
              f"queue {name!r}", validate_unique=False)


def _check_option_names(options: dict[str, Any]) -> None:
    unknown = set(options) - {f.name for f in Queue._meta.get_fields()
                              if getattr(f, "editable", False) and f.name not in {"id", "name"}}
    if unknown:
        raise ConfigurationError(f"Unknown queue option(s): {', '.join(sorted(unknown))}")


def _database_and_row(name: str, database: str | None,
                      partition: bool) -> tuple[str, Queue | None]:
    """The database a new queue ``name`` goes to, and the row of that name that
    already exists (a partition's: on that database; any other's: on any)."""
    if partition:
        db = database or placement.home()
        return db, working_rows(db).filter(name=name).first()
    if placement.ruled_partitions(name) is not None:
        raise ConfigurationError(f"Queue {name!r} is partitioned by DJQUEUE['QUEUE_DATABASES']"
                                 ": create it with djqueue.create_queue().")
    return placement.creation_database(name, database), _find(name)


def _dead_letter_queue_beside(name: str, dlq: object, db: str, partition: bool) -> Queue:
    """The ``dead_letter_queue`` option (a name or a Queue) as the Queue on ``db``; a
    ConfigurationError if it is neither, or lives on another database."""
    if isinstance(dlq, str):  # a partition's is the dead-letter queue's row beside it
        dlq = get_queue_on(dlq, db) if partition else get_queue(dlq, fresh=True)
    elif not isinstance(dlq, Queue):
        raise ConfigurationError(f"dead_letter_queue is a queue's name or a Queue, not "
                                 f"{shown_value(dlq)}.")
    if placement.database_of(dlq) != db:
        raise ConfigurationError(
            f"Queue {name!r} lives on database {db!r}; its dead-letter queue "
            f"{dlq.name!r} lives on {placement.database_of(dlq)!r}. A message is moved to "
            f"its dead-letter queue in one transaction, so both must share a database.")
    return dlq


def get_queue_on(name: str, db: str) -> Queue:
    """Queue ``name``'s row on database ``db`` (a partition's), through the same cache."""
    key = (db, name)
    now = time.monotonic()
    if (cached := _cached(key, now)) is not None:
        return cached
    queue = working_rows(db).filter(name=name).first()
    if queue is None:
        raise QueueNotFound(name, f"Queue {name!r} has no row on database {db!r}.")
    _keep(key, queue, db, now)
    return queue


def working_rows(db: str) -> QuerySet[Queue]:
    """The queue rows of ``db`` as a queue's work reads them: without the creation time
    (lookup_statements.QUEUE_COLUMNS)."""
    return Queue.objects.using(db).only(*(f.attname for f in lookup_statements.QUEUE_COLUMNS))


def _cached(key: tuple[str, str], now: float) -> Queue | None:
    """The row cached under ``key`` (database or "", name), unless older than the TTL."""
    hit = _cache.get(key)
    if hit is not None and now - hit[0] < get_settings().QUEUE_CACHE_TTL:
        return hit[1]
    return None


def _keep(key: tuple[str, str], queue: Queue, db: str, now: float) -> None:
    """Cache ``queue``, read at ``now``, under ``key`` and under its id on ``db``."""
    with _cache_lock:
        _cache[key] = (now, queue)
        _cache_by_id[(db, queue.pk)] = (now, queue)


def _option_names() -> list[str]:
    return [f.attname for f in Queue._meta.concrete_fields if f.name not in {"id", "name"}]


def forget_cached() -> None:
    with _cache_lock:
        _cache.clear()
        _cache_by_id.clear()
    placement.forget()


@receiver(post_save, sender=Queue)
@receiver(post_delete, sender=Queue)
def _invalidate(sender: type[Queue], instance: Queue, **kwargs: Any) -> None:
    forget(instance.name)
    if kwargs.get("signal") is post_delete:
        placement.forget(instance.name)


def forget(name: str) -> None:
    """Drop the cached rows of queue ``name`` (it was changed)."""
    with _cache_lock:
        for key in [k for k in _cache if k[1] == name]:
            del _cache[key]
        _cache_by_id.clear()
