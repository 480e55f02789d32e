"""The processes serving queues, from their heartbeat rows
(djqueue.monitoring.worker_listing): what ``celery status`` and ``celery inspect
active`` give their users.

    manage.py djqueue_workers           # a table, oldest process first
    manage.py djqueue_workers --json    # one JSON list, with the held messages' ids

Each is a worker, an HTTP API server holding long polls (kind ``http``), a process
whose ``receive()`` waits (kind ``receive``) or a long-running reaper (kind
``reaper``): the last three run no handler threads; an HTTP server and a waiting
receive register so that sends wake them, a reaper so that it is seen. A process
silent past ``WORKER_TIMEOUT`` is marked late: the reaper judges it dead and returns
its claims. CLOCK is how far its host's clock was from the database servers' at its
latest comparison (the furthest, "+" when ahead; "(far)" past 1 s, where its log
warns unless the comparison's read took twice the excess). A heartbeat time a hand
edit left unreadable shows as "unreadable" (``null`` in ``--json``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from djqueue.management.database_ready import DatabaseReadyCommand
from djqueue.management.tables import seconds_text, write_table
from djqueue.monitoring.worker_listing import clock_text, worker_rows


class Command(DatabaseReadyCommand):
    help = "List the processes serving queues (workers, HTTP servers, waiting receives)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="One JSON list.")

    def handle(self, *args: object, **options: Any) -> None:
        rows = worker_rows()
        if options["json"]:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        if not rows:
            self.stdout.write("No worker is registered.")
            return
        write_table(self.stdout, ("WORKER", "KIND", "QUEUES", "THREADS", "HOLDING", "HEARTBEAT", "UP",
                                  "CLOCK", "DATABASES"), [(
            r["id"], r["kind"], ",".join(r["queues"]) or "-", str(r["concurrency"]), str(r["holding"]),
            _heartbeat_text(r), seconds_text(r["up"]), _clock_text(r), ",".join(r["databases"]))
            for r in rows])


def _heartbeat_text(row: dict[str, Any]) -> str:
    if row["heartbeat_age"] is None:  # a hand edit left its time unreadable
        return "unreadable"
    return f"{seconds_text(row['heartbeat_age'])} ago" + (" (late)" if row["late"] else "")


def _clock_text(row: dict[str, Any]) -> str:
    """The offset furthest from zero among its databases' (djqueue.monitoring.worker_listing)."""
    offsets = [offset for offset in row["clock_offsets"].values() if offset is not None]
    return clock_text(max(offsets, key=abs) if offsets else None)
