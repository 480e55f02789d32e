"""A time as djqueue shows it: in a row's name (``__str__``), a command's table, an
admin page, a JSON answer.

A time a hand edit left unreadable (PostgreSQL's 'infinity', text on SQLite that is
no date, MariaDB's zero date) is read as None where djqueue reads such rows
(djqueue.storage.unreadable_rows); the admin names each row it lists, so a name that
formatted None would fail the list the row is in. Text for a person says "unreadable";
JSON says null.
"""

from __future__ import annotations

from datetime import datetime


def shown_time(moment: datetime | None, pattern: str = "%Y-%m-%d %H:%M") -> str:
    """``moment`` formatted with ``pattern``; "unreadable" for None."""
    return "unreadable" if moment is None else moment.strftime(pattern)


def shown_iso(moment: datetime | None, timespec: str = "seconds", sep: str = "T") -> str:
    """``moment`` in ISO 8601 to ``timespec``; "unreadable" for None."""
    return "unreadable" if moment is None else moment.isoformat(sep=sep, timespec=timespec)


def iso_or_null(moment: datetime | None) -> str | None:
    """``moment`` in ISO 8601, whole, for JSON; None (null) for one unreadable."""
    return None if moment is None else moment.isoformat()
