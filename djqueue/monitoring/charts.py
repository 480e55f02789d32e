"""The dashboard's charts: throughput and 95th-percentile latencies over the last hour
and the last day, from the statistics roll-ups (two indexed reads, whatever the
backlog), for one queue or all."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from djqueue import histograms
from djqueue.models import Period, Queue, QueueStat
from djqueue.monitoring import rollups
from djqueue.storage import dialects, host_clock


@dataclass
class Charts:
    """The dashboard's charts, for one queue or all: throughput and latency over the last
    hour (a value a minute) and the last day (a value an hour), oldest first. Latencies
    are 95th percentiles in milliseconds, from the roll-ups' histograms (None: no data)."""

    queue: Queue | None
    finished_minute: list[int]
    finished_hour: list[int]
    wait_p95_minute: list[int | None]
    run_p95_minute: list[int | None]
    wait_p95_hour: list[int | None]
    run_p95_hour: list[int | None]

    @property
    def empty(self) -> bool:
        return not any(self.finished_minute) and not any(self.finished_hour)


def load(queue: Queue | None = None, now: datetime | None = None) -> Charts:
    """Two indexed reads of the roll-ups: the last hour's minutes and the last day's hours."""
    db = dialects.alias()
    now = now or host_clock.database_now(db)
    rows = QueueStat.objects.using(db)
    if queue is not None:
        rows = rows.filter(queue_id=queue.pk)
    fields = ("start", "acked", "deleted", "wait_hist", "run_hist")
    this_minute, this_hour = rollups.minute_of(now), rollups.hour_of(now)
    minutes = _by_slot(rows.filter(period=Period.MINUTE,
                                   start__gt=this_minute - timedelta(minutes=60)
                                   ).values_list(*fields),
                       lambda start: 59 - int((this_minute - rollups.minute_of(start))
                                              .total_seconds() // 60), 60)
    hours = _by_slot(rows.filter(period=Period.HOUR, start__gt=this_hour - timedelta(hours=24)
                                 ).values_list(*fields),
                     lambda start: 23 - int((this_hour - rollups.hour_of(start))
                                            .total_seconds() // 3600), 24)
    return Charts(queue, finished_minute=minutes[0], finished_hour=hours[0],
                  wait_p95_minute=minutes[1], run_p95_minute=minutes[2],
                  wait_p95_hour=hours[1], run_p95_hour=hours[2])


def _by_slot(rows: Iterable[tuple], slot_of: Callable[[datetime], int], slots: int,
             ) -> tuple[list[int], list[int | None], list[int | None]]:
    """Finished counts and wait/run p95 (ms) per slot, the queues' histograms merged."""
    finished = [0] * slots
    waits: list[dict] = [{} for _ in range(slots)]
    runs: list[dict] = [{} for _ in range(slots)]
    for start, acked, deleted, wait_hist, run_hist in rows:
        slot = slot_of(start)
        if 0 <= slot < slots:
            finished[slot] += acked + deleted
            waits[slot] = histograms.merge(waits[slot], wait_hist)
            runs[slot] = histograms.merge(runs[slot], run_hist)

    def p95(hist: dict) -> int | None:
        value = histograms.quantile(hist, 0.95)
        return None if value is None else round(value * 1000)

    return finished, [p95(h) for h in waits], [p95(h) for h in runs]
