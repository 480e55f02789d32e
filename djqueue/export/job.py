"""The export job: history and reports as Spark datasets.

Reads djqueue's tables over JDBC in parallel partitions split on the primary
key, writes the history partitioned by queue and date, and optionally report
datasets. The same class runs from ``manage.py djqueue_export`` and, through
``djqueue/export/spark_app.py``, from ``spark-submit`` on a cluster.

Every database djqueue keeps queues on is read, one JDBC source each, and the
rows are unioned (djqueue.storage.placement): a queue on its own database, or
partitioned over several, is exported as if it lived on one. A row's
``database`` column names where it was (message ids are per database).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.utils import timezone

from djqueue.exceptions import ConfigurationError
from djqueue.export import jdbc, reports
from djqueue.export.hadoop_files import HadoopFiles
from djqueue.export.reports import id_bounds
from djqueue.models import ExportRun, History, Message, Queue, State
from djqueue.models.names import is_valid_name
from djqueue.storage import placement

logger = logging.getLogger("djqueue.export")

FORMATS = ("parquet", "csv", "json")
OUTCOMES = {1: "acked", 2: "deleted"}
TIMESTAMPS = ("sent_at", "claimed_at", "finished_at", "visible_at", "published_at")


@dataclass
class ExportOptions:
    out: str
    since: datetime | None = None
    until: datetime | None = None
    queues: list[str] = field(default_factory=list)
    format: str = "parquet"
    master: str | None = "local[*]"
    partitions: int = 4
    report: bool = False
    incremental: bool = False
    #: An incremental run leaves the rows finished in its last seconds for the next run,
    #: so that a transaction committing late cannot fall behind the watermark. A full
    #: run takes everything finished before it started.
    settle_seconds: float = 5.0


@dataclass
class ExportResult:
    window_start: datetime | None
    window_end: datetime
    datasets: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class Exporter:
    def __init__(self, options: ExportOptions, spark: Any = None,
                 progress: Any = None) -> None:
        if options.format not in FORMATS:
            raise ConfigurationError(f"--format must be one of {', '.join(FORMATS)}.")
        if options.partitions < 1:
            raise ConfigurationError("--partitions must be at least 1.")
        self.options = options
        #: The home database: the export's watermark rows.
        self.db = placement.home()
        self.databases = list(placement.databases())
        #: Where each database is read: its read replica, when there is one.
        self.reads = {db: placement.read_database(db) for db in self.databases}
        self.sources = {db: jdbc.source_for(connections[read].settings_dict,
                                            connections[read].vendor)
                        for db, read in self.reads.items()}
        self.queue_ids = self._queue_ids(options.queues)
        self.spark = spark
        self._owns_spark = spark is None
        self.progress = progress or (lambda text: logger.info("%s", text))

    # Orchestration

    def run(self) -> ExportResult:
        started = time.monotonic()
        start, end = self.window()
        result = ExportResult(start, end)
        if self.spark is None:
            self.spark = self.start_spark()
        try:
            history = self.history(start, end)
            result.datasets["history"] = self.write_history(history, start)
            if self.options.report:
                for name, frame in self.reports(history, start, end).items():
                    result.datasets[f"report/{name}"] = self.write(frame, f"report/{name}")
            if self.options.incremental:
                ExportRun.objects.using(self.db).create(
                    target=self.options.out, window_start=start, window_end=end,
                    rows=result.datasets["history"])
        finally:
            if self._owns_spark:
                self.spark.stop()
        result.seconds = time.monotonic() - started
        return result

    def window(self) -> tuple[datetime | None, datetime]:
        """[start, end) of finish times to export."""
        end = timezone.now() - timedelta(
            seconds=self.options.settle_seconds if self.options.incremental else 0)
        for db, read in self.reads.items():
            if read == db:
                continue
            # What the replica has not replayed yet is left out: the window ends as far
            # back as it lags (an incremental run's watermark must not pass rows it lacks).
            lag = placement.replica_lag(read)
            if lag is None:
                raise ConfigurationError(
                    f"The read replica {read!r} is not replicating, so the export cannot "
                    f"tell what it lacks: start its replication, or unset READ_DATABASE.")
            end -= timedelta(seconds=lag)
        if self.options.until is not None:
            end = min(end, self.options.until)
        start = self.options.since
        if self.options.incremental:
            last = (ExportRun.objects.using(self.db).filter(target=self.options.out)
                    .order_by("-window_end").first())
            if last is not None:
                start = last.window_end
        return start, end

    def start_spark(self) -> Any:
        jdbc.require_java()
        from pyspark.sql import SparkSession

        utc = "-Duser.timezone=UTC"
        builder = SparkSession.builder
        if self.options.master:  # empty under spark-submit, which sets the master itself
            builder = builder.master(self.options.master)
        jars = ",".join(dict.fromkeys(s.jar_path for s in self.sources.values()))
        return (builder.appName("djqueue-export")
                .config("spark.jars", jars)
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.driver.extraJavaOptions", utc)
                .config("spark.executor.extraJavaOptions", utc)
                .config("spark.ui.enabled", "false")
                .getOrCreate())

    # Reading

    def read(self, db: str, model: Any, bounds: tuple[int, int] | None) -> Any:
        """A model's table on ``db`` over JDBC, split on the primary key when ``bounds`` are
        given."""
        columns = [f.column for f in model._meta.concrete_fields]
        names = [c for c in columns if c in TIMESTAMPS]
        reader = self.spark.read.format("jdbc").options(**self.sources[db].options(
            model._meta.db_table, columns, names)).option("fetchsize", "10000")
        if connections[self.reads[db]].vendor == "sqlite" and names:
            # Why: SQLite keeps datetimes as text, which the JDBC driver cannot
            # read as timestamps; read them as strings and convert in Spark.
            reader = reader.option("customSchema", ", ".join(f"{n} STRING" for n in names))
        if bounds is not None and self.options.partitions > 1:
            low, high = bounds
            reader = reader.options(partitionColumn=model._meta.pk.column, lowerBound=str(low),
                                    upperBound=str(high + 1),
                                    numPartitions=str(self.options.partitions))
        frame = reader.load()
        from pyspark.sql import functions as F

        for name in TIMESTAMPS:
            if name in frame.columns and dict(frame.dtypes)[name] == "string":
                # try_: a text that is no time (a hand edit) is read as null, as the
                # other databases' unreadable times are, rather than failing the run.
                frame = frame.withColumn(name, F.try_to_timestamp(name))
        return frame

    def history(self, start: datetime | None, end: datetime) -> Any:
        """Finished and dead-lettered messages of the window, one row each, from every
        database."""
        frames = [self._history_on(db, start, end) for db in self.databases]
        history = frames[0]
        for frame in frames[1:]:
            history = history.unionByName(frame)
        return history

    def _history_on(self, db: str, start: datetime | None, end: datetime) -> Any:
        from pyspark.sql import functions as F

        queue_ids = None if self.queue_ids is None else self.queue_ids.get(db, [-1])
        finished = History.objects.using(self.reads[db]).filter(finished_at__lt=end)
        dead = Message.objects.using(self.reads[db]).filter(state=State.DEAD, visible_at__lt=end)
        if start is not None:
            finished = finished.filter(finished_at__gte=start)
            dead = dead.filter(visible_at__gte=start)
        if queue_ids is not None:
            finished = finished.filter(queue_id__in=queue_ids)
            dead = dead.filter(queue_id__in=queue_ids)

        def in_window(frame: Any, column: str) -> Any:
            frame = frame.where(F.col(column) < F.lit(end))
            if start is not None:
                frame = frame.where(F.col(column) >= F.lit(start))
            if queue_ids is not None:
                frame = frame.where(F.col("queue_id").isin(queue_ids))
            return frame

        outcome = F.create_map(*[F.lit(x) for kv in OUTCOMES.items() for x in kv])
        done = in_window(self.read(db, History, id_bounds(finished)), "finished_at").select(
            "id", "queue_id", outcome[F.col("outcome")].alias("outcome"), "group_key",
            "priority", "attempts", F.col("size").cast("long").alias("size"), "worker",
            "sent_at", "claimed_at", "finished_at")
        failed = in_window(self.read(db, Message, id_bounds(dead)).where(
            F.col("state") == int(State.DEAD)), "visible_at").select(
            "id", F.coalesce("origin_queue_id", "queue_id").alias("queue_id"),
            F.lit("dead_lettered").alias("outcome"), "group_key", "priority", "attempts",
            F.octet_length("body").cast("long").alias("size"), F.lit("").alias("worker"),
            "sent_at", "claimed_at", F.col("visible_at").alias("finished_at"))
        queues = self.read(db, Queue, None).select(F.col("id").alias("queue_id"),
                                                   F.col("name").alias("queue"))
        seconds = F.unix_micros
        return (done.unionByName(failed).join(F.broadcast(queues), "queue_id")
                .withColumn("database", F.lit(db))
                .withColumn("wait_seconds",
                            (seconds("claimed_at") - seconds("sent_at")) / 1e6)
                .withColumn("run_seconds",
                            (seconds("finished_at") - seconds("claimed_at")) / 1e6)
                .withColumn("date", F.to_date("finished_at")))

    # Writing

    def write_history(self, history: Any, start: datetime | None) -> int:
        """Write the history; incremental runs add their files next to the earlier ones."""
        if not self.options.incremental:
            return self.write(history, "history", partition_by=["queue", "date"])
        run_key = "run-" + (start.strftime("%Y%m%dT%H%M%S%f") if start else "first")
        staging = f"_staging/{run_key}"
        fs = HadoopFiles(self.spark, self.options.out)
        # A run that died after moving some files left them under this key; the
        # watermark did not move, so this run redoes the same window: drop them.
        fs.delete_matching("history", run_key + "-")
        count = self.write(history, staging, partition_by=["queue", "date"], label="history")
        fs.promote(staging, "history", run_key + "-")
        return count

    def write(self, frame: Any, name: str, partition_by: list[str] | None = None,
              label: str | None = None) -> int:
        started = time.monotonic()
        path = f"{self.options.out.rstrip('/')}/{name}"
        writer = frame.write.mode("overwrite").format(self.options.format)
        if self.options.format == "csv":
            writer = writer.option("header", "true")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(path)
        # Counted from what was written (Parquet: from file footers alone).
        reader = self.spark.read.format(self.options.format)
        if self.options.format == "csv":
            reader = reader.option("header", "true")
        count = reader.load(path).count() if HadoopFiles(self.spark, path).has_data() else 0
        self.progress(f"{label or name}: {count} rows in {time.monotonic() - started:.1f} s")
        return count

    # Reports (djqueue.export.reports)

    def reports(self, history: Any, start: datetime | None, end: datetime) -> dict[str, Any]:
        return reports.build(self, history, start, end)

    # Helpers

    def _queue_ids(self, names: list[str]) -> dict[str, list[int]] | None:
        """The ids of the queues named, on each database (a partitioned queue has one on
        each of its partitions)."""
        if not names:
            return None
        found: dict[str, list[int]] = {}
        seen: set[str] = set()
        # A lone surrogate is what argv holds for a byte no UTF-8 reads.
        named = [name for name in names if is_valid_name(name)]
        for db in self.databases:
            rows = list(Queue.objects.using(self.reads[db]).filter(name__in=named)
                        .values_list("name", "pk"))
            found[db] = sorted(pk for _, pk in rows)
            seen |= {name for name, _ in rows}
        missing = sorted(set(names) - seen)
        if missing:
            raise ConfigurationError(f"No such queue(s): {', '.join(map(repr, missing))}")
        return found
