from datetime import UTC, datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from djqueue.exceptions import DjqueueError
from djqueue.management.arguments import whole_number
from djqueue.management.database_ready import DatabaseReadyCommand


def moment(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class Command(DatabaseReadyCommand):
    help = "Export message history (and reports) with PySpark, reading the database over JDBC."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="Output directory (or hdfs://, s3a://).")
        parser.add_argument("--since", type=moment, help="Messages finished at or after (ISO).")
        parser.add_argument("--until", type=moment, help="Messages finished before (ISO).")
        parser.add_argument("--queue", action="append", default=[], dest="queues",
                            help="Only these queues (repeatable).")
        parser.add_argument("--format", default="parquet", choices=["parquet", "csv", "json"])
        parser.add_argument("--master", default="local[*]",
                            help="Spark master: local[*], spark://host:7077, yarn, ...")
        parser.add_argument("--partitions", type=whole_number(1, 1000), default=4,
                            help="Parallel JDBC reads, split on the primary key.")
        parser.add_argument("--report", action="store_true", help="Also write report datasets.")
        parser.add_argument("--incremental", action="store_true",
                            help="Only what finished since the last successful export to --out.")

    def handle(self, *args: Any, **options: Any) -> None:
        from djqueue.export.jdbc import require_java  # imported when run: PySpark is optional

        try:
            require_java()
            from djqueue.export.job import Exporter, ExportOptions  # imports PySpark (optional)

            exporter = Exporter(ExportOptions(
                out=options["out"], since=options["since"], until=options["until"],
                queues=options["queues"], format=options["format"], master=options["master"],
                partitions=options["partitions"], report=options["report"],
                incremental=options["incremental"]),
                progress=lambda text: self.stdout.write(f"  {text}"))
            sources = ", ".join(s.url for s in exporter.sources.values())
            self.stdout.write(f"Exporting from {sources} to {options['out']} ...")
            result = exporter.run()
        except DjqueueError as exc:
            raise CommandError(str(exc)) from None
        except ImportError as exc:
            raise CommandError(f"PySpark is not installed ({exc}): pip install "
                               "'djqueue[export]' (pyspark, pyarrow).") from None
        start = result.window_start.isoformat() if result.window_start else "the beginning"
        self.stdout.write(f"Window: {start} .. {result.window_end.isoformat()}")
        self.stdout.write(f"{'dataset':32} {'rows':>10}")
        for name, rows in result.datasets.items():
            self.stdout.write(f"{name:32} {rows:>10}")
        self.stdout.write(self.style.SUCCESS(f"Done in {result.seconds:.1f} s."))
