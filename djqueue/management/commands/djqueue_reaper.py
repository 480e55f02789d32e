from typing import Any

from django.core.management.base import CommandError, CommandParser

from djqueue import durations
from djqueue.maintenance.reaper import Reaper
from djqueue.management.arguments import alive_file, seconds
from djqueue.management.database_ready import DatabaseReadyCommand
from djqueue.processes.base import run_anew


class Command(DatabaseReadyCommand):
    help = ("Return claims of dead workers and expired leases, promote due delayed messages "
            "and prune history. Safe to run several at once.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Do one pass and exit.")
        parser.add_argument("--alive-file", type=alive_file, default=None, metavar="PATH",
                            help="Refresh this file's modification time every second while "
                                 "the process's loop runs, for a liveness probe; removed "
                                 "as it stops.")
        parser.add_argument("--interval", type=seconds(durations.HOUR), default=None,
                            help="Seconds between passes (default: DJQUEUE['REAPER_INTERVAL']).")

    def waits_for_database(self, options: dict[str, Any]) -> bool:
        """A long-running reaper waits for its database; ``--once`` (cron) does not."""
        return not options["once"]

    def handle(self, *args: Any, once: bool, interval: float | None, **options: Any) -> None:
        reaper = Reaper(interval=interval)
        reaper.alive_file = options["alive_file"]
        if once and reaper.alive_file is not None:
            raise CommandError("--alive-file is for a reaper that keeps running, not --once.")
        if once:
            report = reaper.once()
            self.stdout.write(f"dead workers {report.dead_workers}, returned "
                              f"{report.returned_from_dead}, expired {report.expired}, "
                              f"promoted {report.promoted}, pruned {report.pruned}")
            return
        reaper.run()
        if reaper.runs_anew:  # SIGHUP: the code deployed since
            run_anew()
