"""A time as a row's name (``__str__``) shows it.

A time a hand edit left unreadable (PostgreSQL's 'infinity', text on SQLite that is
no date, MariaDB's zero date) is read as None where djqueue reads such rows
(djqueue.storage.unreadable_rows); the admin names each row it lists, so a name that
formatted None would fail the list the row is in.
"""

from __future__ import annotations

from datetime import datetime


def shown_time(moment: datetime | None, pattern: str = "%Y-%m-%d %H:%M") -> str:
    """``moment`` formatted with ``pattern``; "unreadable" for None."""
    return "unreadable" if moment is None else moment.strftime(pattern)
