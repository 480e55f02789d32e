"""Reading the registered processes' rows (``djqueue_worker``), whatever times are in them.

A hand edit or another tool can leave a time no driver reads back: PostgreSQL's
``'infinity'``, text on SQLite that is no date (MariaDB's driver reads a zero date as
None). The reaper judges the rows (djqueue.maintenance.dead_workers); ``djqueue_workers``,
``/metrics`` and the dashboard show them. Each read them all in one statement, so one
such row ended every reaper pass over its database and failed each of the others, until
its worker was judged dead.

:func:`read_worker_rows` reads them in one statement and, only if that fails, one at a
time; a row whose times cannot be read comes with them as None, as MariaDB's comes, and
its other columns read. A reader shows the rest of the row and takes its times as
unknown: the reaper judges its worker dead once they have stayed so for
``WORKER_TIMEOUT`` (a live worker's next heartbeat writes a time that reads).
"""

from __future__ import annotations

from djqueue.models import Worker
from djqueue.storage.unreadable_messages import UNREADABLE

#: A worker row's times, the only columns a hand edit can make unreadable (its JSON
#: columns read back as text if they are no JSON, its numbers as what is there).
TIMES = ("started_at", "heartbeat_at")


def read_worker_rows(db: str, *fields: str) -> list[Worker]:
    """``db``'s worker rows, oldest first, with ``fields`` alone if any are named; in a
    row whose times cannot be read, they are None."""
    rows = Worker.objects.using(db).order_by("started_at")
    if fields:
        rows = rows.only(*fields)
    try:
        return list(rows)
    except UNREADABLE:
        pass
    read = []
    for pk in rows.values_list("pk", flat=True):
        try:
            row = rows.filter(pk=pk).first()
        except UNREADABLE:
            row = rows.defer(*TIMES).filter(pk=pk).first()
            if row is not None:
                for name in TIMES:  # the unknown they are; not read again on access
                    setattr(row, name, None)
        if row is not None:  # None: gone between the two reads
            read.append(row)
    return read
