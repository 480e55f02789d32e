"""The periodic schedules, from the settings and the database, with their last and
next runs (djqueue.maintenance.periodic_listing): what Solid Queue's recurring-task
list and Oban's cron page show their users.

    manage.py djqueue_periodic           # a table
    manage.py djqueue_periodic --json    # one JSON list

A stored schedule the reaper skips says why in its NEXT column; a paused one says
"paused".
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from djqueue.maintenance.periodic_listing import schedule_rows
from djqueue.management.database_ready import DatabaseReadyCommand
from djqueue.management.tables import write_table


class Command(DatabaseReadyCommand):
    help = "List the periodic schedules (settings and database) with their last and next runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="One JSON list.")

    def handle(self, *args: object, **options: Any) -> None:
        rows = schedule_rows()
        if options["json"]:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        if not rows:
            self.stdout.write("No periodic schedule: add one to DJQUEUE['PERIODIC'] or in "
                              "the admin.")
            return
        write_table(self.stdout, ("NAME", "SOURCE", "TASK", "CRON", "TIME ZONE", "LAST RUN",
                                  "NEXT RUN"), [(
            r["name"], r["source"], r["task"], r["cron"], r["time_zone"],
            r["last_run"] or "-", r["problem"] or r["next_run"]
            or ("paused" if not r["enabled"] else "never")) for r in rows])
