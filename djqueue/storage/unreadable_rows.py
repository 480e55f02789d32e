"""Rows holding a time no driver reads back, read all the same.

A hand edit or another tool can leave such a time: PostgreSQL's ``'infinity'``, text on
SQLite that is no date (MariaDB's driver reads a zero date as None). Read with the
others in one statement, one such row fails the whole read, so what reads a table's
rows to do its work stopped at it: the reaper's judgement of workers, the periodic
scheduler, the alarms, the statistics, ``djqueue_workers``, ``/metrics`` and the
dashboard, ``peek`` (the API's, the command's and the HTTP API's) and the admin's lists
and pages, every pass or request until a person mended the row.

:func:`read_rows` reads in one statement and, only if that fails, one row at a time; in
a row that fails, each time that cannot be read is None (as MariaDB's zero date is), and
the rest of it is as stored. :func:`read_values` does the same for the columns of a query
too large to hold, for a reader that has already failed on it (the statistics' count of
finished messages). Each reader says what an unknown time means to it. A claim does not
read messages so: it sets an unreadable one aside (djqueue.storage.unreadable_messages).
An aggregate of times (a schedule's last run, a group's oldest delivery) reads its
result through :class:`ReadableTime`, in the same one statement: None if it is such a
time.

Work that needs no time of a row reads it through :func:`without_times` (a topic, a
consumer group, a delivery's body) or, for queues, queue_lookup.working_rows. Why at
each reader, not as the models' default: the admin and the reports show those times,
and a deferred time is one more query a row when read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from django.db import DataError, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql.compiler import SQLCompiler

from djqueue.storage.statements.vendor_sql import readable_time_sql

#: What reading a row raises when a value cannot be read: psycopg's "timestamp too
#: large" (a DataError), Django's or Python's date checks (ValueError, OverflowError).
UNREADABLE = (DataError, ValueError, OverflowError)

M = TypeVar("M", bound=models.Model)

#: How many foreign keys deep ``select_related()`` without names follows (Django's).
_JOIN_DEPTH = 5


class ReadableTime(models.Func):
    """A time (a column, or an aggregate of one) as stored, or NULL where the driver
    would not read it back (vendor_sql.readable_time_sql): for an aggregate whose result
    may be such a time, read in the one statement that computes it."""

    arity = 1
    output_field = models.DateTimeField()

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper,
               function: str | None = None, template: str | None = None,
               arg_joiner: str | None = None, **extra: Any) -> tuple[str, tuple[Any, ...]]:
        time, params = compiler.compile(self.source_expressions[0])
        sql = readable_time_sql(connection.vendor)
        return sql.format(a=time), tuple(params) * sql.count("{a}")


def times_of(model: type[models.Model]) -> tuple[str, ...]:
    """The columns of ``model`` that hold a time."""
    return tuple(f.attname for f in model._meta.concrete_fields
                 if isinstance(f, models.DateTimeField))


def read_rows(rows: models.QuerySet[M], limit: int | None = None, offset: int = 0) -> list[M]:
    """``rows`` (``limit`` of them from ``offset``: a page), in their order; in a row that
    fails, each time that cannot be read is None."""
    end = None if limit is None else offset + limit
    try:
        return list(rows[offset:end])
    except UNREADABLE:
        pass
    times = times_of(rows.model)
    joined = _joined_times(rows.model, rows.query.select_related)
    read = []
    for pk in rows.values_list("pk", flat=True)[offset:end]:
        one = rows.filter(pk=pk)
        try:
            row = one.first()
        except UNREADABLE:
            row = one.defer(*times, *joined).first()
            if row is not None:
                for name, value in zip(times, _times(one, times), strict=True):
                    setattr(row, name, value)  # read once; not again on access
        if row is not None:  # None: gone between the two reads
            read.append(row)
    return read


def without_times(rows: models.QuerySet[M]) -> models.QuerySet[M]:
    """``rows`` read without the times of their rows and of the rows they join in
    (``select_related``), for work that reads none of them: a topic's or a consumer
    group's creation time, say, that a hand edit left unreadable then stops nothing.
    A deferred time is read on access, as Django reads one."""
    return rows.defer(*times_of(rows.model), *_joined_times(rows.model,
                                                            rows.query.select_related))


def first_row(rows: models.QuerySet[M]) -> M | None:
    """The first of ``rows``, or None, read as :func:`read_rows` reads them."""
    found = read_rows(rows, 1)
    return found[0] if found else None


def values_of(rows: models.QuerySet[Any], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """``columns`` of each of ``rows`` (a few), in one statement or, if that fails,
    as :func:`read_values` reads them."""
    try:
        return list(rows.values_list(*columns))
    except UNREADABLE:
        return list(read_values(rows, columns))


def read_values(rows: models.QuerySet[Any], columns: Sequence[str],
                chunk: int = 1000) -> Iterator[tuple[Any, ...]]:
    """``columns`` of each of ``rows``, as ``values_list`` gives them, for a reader whose
    read of them in one statement failed: in chunks of ``chunk`` rows, and a chunk that
    fails one row at a time, with None for each time of that row that cannot be read."""
    all_times = times_of(rows.model)
    times = [name for name in columns if name in all_times]
    others = [name for name in columns if name not in all_times]
    pks = list(rows.values_list("pk", flat=True))
    for start in range(0, len(pks), chunk):
        part = rows.filter(pk__in=pks[start:start + chunk])
        try:
            yield from list(part.values_list(*columns))
            continue
        except UNREADABLE:
            pass
        for pk in pks[start:start + chunk]:
            one = part.filter(pk=pk)
            try:
                yield one.values_list(*columns).get()
                continue
            except UNREADABLE:
                pass
            except rows.model.DoesNotExist:  # gone between the reads
                continue
            rest = one.values_list(*others).first() if others else ()
            if rest is None:  # gone between the reads
                continue
            known = dict(zip(others, rest, strict=True))
            known.update(zip(times, _times(one, times), strict=True))
            yield tuple(known[name] for name in columns)


def _joined_times(model: type[models.Model], joined: Any, prefix: str = "",
                  depth: int = 0) -> list[str]:
    """The times of the rows a query joins in (``select_related``: a tree of field names,
    True for every foreign key that may not be null, or False), as ``defer`` names them:
    a joined row shows its name, not its times."""
    if joined is True:  # as deep as Django follows them
        joined = {f.name: True for f in model._meta.concrete_fields
                  if f.is_relation and not f.null} if depth < _JOIN_DEPTH else {}
    if not isinstance(joined, dict):
        return []
    names = []
    for name, deeper in joined.items():
        related = model._meta.get_field(name).related_model
        assert isinstance(related, type), "select_related names foreign keys"
        names += [f"{prefix}{name}__{time}" for time in times_of(related)]
        names += _joined_times(related, deeper, f"{prefix}{name}__", depth + 1)
    return names


def _times(one: models.QuerySet[Any], times: Sequence[str]) -> list[Any]:
    """Each of ``times`` of the one row of ``one``, read alone; None for one that cannot
    be read (or a row gone)."""
    values: list[Any] = []
    for name in times:
        try:
            values.append(one.values_list(name, flat=True).first())
        except UNREADABLE:
            values.append(None)
    return values
