from typing import Any

from django.core.management.base import CommandParser

from djqueue import durations
from djqueue.maintenance.reaper import Reaper
from djqueue.management.arguments import seconds
from djqueue.management.database_ready import DatabaseReadyCommand


class Command(DatabaseReadyCommand):
    help = ("Return claims of dead workers and expired leases, promote due delayed messages "
            "and prune history. Safe to run several at once.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Do one pass and exit.")
        parser.add_argument("--interval", type=seconds(durations.HOUR), default=None,
                            help="Seconds between passes (default: DJQUEUE['REAPER_INTERVAL']).")

    def waits_for_database(self, options: dict[str, Any]) -> bool:
        """A long-running reaper waits for its database; ``--once`` (cron) does not."""
        return not options["once"]

    def handle(self, *args: Any, once: bool, interval: float | None, **options: Any) -> None:
        reaper = Reaper(interval=interval)
        if once:
            report = reaper.once()
            self.stdout.write(f"dead workers {report.dead_workers}, returned "
                              f"{report.returned_from_dead}, expired {report.expired}, "
                              f"promoted {report.promoted}, pruned {report.pruned}")
            return
        reaper.run()
