"""Rows holding a time no driver reads back, read all the same.

A hand edit or another tool can leave such a time: PostgreSQL's ``'infinity'``, text on
SQLite that is no date (MariaDB's driver reads a zero date as None). Read with the
others in one statement, one such row fails the whole read, so what reads a table's
rows to do its work stopped at it: the reaper's judgement of workers, the periodic
scheduler, the alarms, and ``djqueue_workers``, ``/metrics`` and the dashboard, every
pass or request until a person mended the row.

:func:`read_rows` reads in one statement and, only if that fails, one row at a time; a
row whose times cannot be read comes with them all as None (as MariaDB's does), and the
rest of it as stored. Each reader says what an unknown time means to it. Messages are
not read so: a claim sets an unreadable one aside (djqueue.storage.unreadable_messages).
"""

from __future__ import annotations

from typing import TypeVar

from django.db import DataError, models

#: What reading a row raises when a value cannot be read: psycopg's "timestamp too
#: large" (a DataError), Django's or Python's date checks (ValueError, OverflowError).
UNREADABLE = (DataError, ValueError, OverflowError)

M = TypeVar("M", bound=models.Model)


def times_of(model: type[models.Model]) -> tuple[str, ...]:
    """The columns of ``model`` that hold a time."""
    return tuple(f.attname for f in model._meta.concrete_fields
                 if isinstance(f, models.DateTimeField))


def read_rows(rows: models.QuerySet[M]) -> list[M]:
    """``rows``, in their order; in a row whose times cannot be read, they are None."""
    try:
        return list(rows)
    except UNREADABLE:
        pass
    times = times_of(rows.model)
    read = []
    for pk in rows.values_list("pk", flat=True):
        try:
            row = rows.filter(pk=pk).first()
        except UNREADABLE:
            row = rows.defer(*times).filter(pk=pk).first()
            if row is not None:
                for name in times:  # the unknown they are; not read again on access
                    setattr(row, name, None)
        if row is not None:  # None: gone between the two reads
            read.append(row)
    return read
