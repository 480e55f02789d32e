"""The export's report datasets: per queue and hour, the slowest handlers, the topics
by volume (``djqueue_export --report``), computed in Spark from the history frame."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Max, Min

from djqueue.models import Body, Topic


def build(exporter: Any, history: Any, start: datetime | None,
          end: datetime) -> dict[str, Any]:
    """The reports of ``history`` (an Exporter's frame); ``exporter`` reads the topics'
    bodies from each database."""
    from pyspark.sql import functions as F

    def pct(column: str, p: float) -> Any:
        return F.percentile_approx(column, p, 10000)

    hourly = (history.withColumn("hour", F.date_trunc("hour", "finished_at"))
              .groupBy("queue", "hour").agg(
                  F.count("*").alias("messages"),
                  F.sum((F.col("outcome") == "acked").cast("int")).alias("acked"),
                  F.sum((F.col("outcome") == "deleted").cast("int")).alias("deleted"),
                  F.sum((F.col("outcome") == "dead_lettered").cast("int"))
                  .alias("dead_lettered"),
                  (F.count("*") / 60.0).alias("per_minute"),
                  pct("wait_seconds", 0.5).alias("wait_p50"),
                  pct("wait_seconds", 0.95).alias("wait_p95"),
                  pct("run_seconds", 0.5).alias("run_p50"),
                  pct("run_seconds", 0.95).alias("run_p95"),
                  F.avg((F.col("attempts") > 1).cast("double")).alias("retry_rate"),
                  F.avg((F.col("outcome") == "dead_lettered").cast("double"))
                  .alias("dead_letter_rate"))
              .orderBy("queue", "hour"))
    slowest = (history.where(F.col("run_seconds").isNotNull()).groupBy("queue").agg(
        F.count("*").alias("messages"), F.avg("run_seconds").alias("run_mean"),
        pct("run_seconds", 0.95).alias("run_p95"), F.max("run_seconds").alias("run_max"))
        .orderBy(F.desc("run_p95")).limit(20))
    published = None
    for db in exporter.databases:
        bodies = Body.objects.using(exporter.reads[db]).filter(published_at__lt=end)
        if start is not None:
            bodies = bodies.filter(published_at__gte=start)
        frame = exporter.read(db, Body, id_bounds(bodies)).where(F.col("published_at") < F.lit(end))
        if start is not None:
            frame = frame.where(F.col("published_at") >= F.lit(start))
        topics = exporter.read(db, Topic, None).select(F.col("id").alias("topic_id"),
                                                   F.col("name").alias("topic"))
        frame = (frame.join(F.broadcast(topics), "topic_id")
                 .select("topic", F.octet_length("body").alias("size")))
        published = frame if published is None else published.unionByName(frame)
    assert published is not None  # a frame a database, and an export reads one at least
    top_topics = (published.groupBy("topic").agg(
        F.count("*").alias("messages"), F.sum("size").alias("bytes"))
        .select("topic", "messages", "bytes").orderBy(F.desc("messages")))
    return {"queue_hourly": hourly, "slowest_handlers": slowest, "top_topics": top_topics}


def id_bounds(query: Any) -> tuple[int, int] | None:
    """The lowest and highest primary key of ``query`` (the JDBC read's split), or None."""
    found = query.aggregate(low=Min("pk"), high=Max("pk"))
    if found["low"] is None:
        return None
    return found["low"], found["high"]
