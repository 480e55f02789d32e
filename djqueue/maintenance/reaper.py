"""The reaper: returns the claims of dead workers and expired leases, promotes
due messages, prunes history, and (PostgreSQL) vacuums and analyzes busy tables. Any number may
run at once: every change locks its rows with SKIP LOCKED and is idempotent.

One reaper serves every database djqueue keeps queues on
(djqueue.storage.placement), one after the other in each pass; a database that
fails its pass (its server is down) is logged and the others are still served.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

from django.db import DatabaseError, connections, transaction
from django.db.models import Q, QuerySet

from djqueue.conf import get_settings
from djqueue.maintenance import queue_errors
from djqueue.maintenance.dead_workers import DeadWorkerFinder
from djqueue.maintenance.periodic import Scheduler
from djqueue.maintenance.pruning import prune_history
from djqueue.maintenance.reap_report import ReapReport
from djqueue.maintenance.vacuuming import ANALYZE, Vacuuming
from djqueue.models import Message, ProcessKind, Queue
from djqueue.models import Worker as WorkerRecord
from djqueue.monitoring import alarms, rollups
from djqueue.processes.base import ProcessBase
from djqueue.storage import (
    dialects,
    expiry,
    host_clock,
    ordered_groups,
    partition_layout,
    partitions,
    placement,
)
from djqueue.storage.failure_streaks import FailureStreaks
from djqueue.storage.registration import Registration
from djqueue.storage.requeueing import promote_due, return_claims

logger = logging.getLogger("djqueue.reaper")

RETURN_BATCH = 500
PRUNE_EVERY = 60.0
#: Seconds between two reads of the busy tables' dead and live rows (PostgreSQL; cheap
#: statement): a drain of 6,000 messages a second leaves 12,000 dead rows a second.
VACUUM_CHECK_EVERY = 1.0


class Reaper(ProcessBase):
    """One pass (``tick``) every ``interval`` seconds: dead workers' claims, expired
    leases, due messages, periodic tasks, expired messages at the head of queues with a
    ``message_ttl`` or a head that stood still, statistics and alarms, pruning."""

    logger = logger

    def __init__(self, interval: float | None = None) -> None:
        super().__init__()
        self.interval = interval if interval is not None else get_settings().REAPER_INTERVAL
        self._last_prune = 0.0
        self._last_stats = 0.0
        self._last_vacuum_check = 0.0
        self.dead_worker_finder = DeadWorkerFinder()
        self.scheduler = Scheduler()
        self.vacuuming = Vacuuming()
        self.passes = 0
        #: Failures that repeat each pass, logged as streaks (an outage is a line each 10 s).
        self._pass_failures = FailureStreaks(logger, "Reaper: the pass over database {}",
                                             key_field="database")
        self._step_failures = FailureStreaks(logger, "Reaper step {}")
        self._started = time.monotonic()
        #: Its rows, once a pass of ``run()`` found queues (``--once`` and a test's
        #: passes register nothing).
        self.registration: Registration | None = None
        self._lock_key: str | None = None
        self.heartbeat_interval = get_settings().HEARTBEAT_INTERVAL

    def register(self) -> None:
        """Its first line, as a worker's. Its rows are written by its passes
        (``_present_on``)."""
        self._started = time.monotonic()
        self._lock_key = uuid.uuid4().hex
        logger.info("Reaper started: a pass every %g s over %s", self.interval,
                    ", ".join(placement.databases()))

    def _present_on(self, db: str) -> None:
        """Be registered on ``db``, a database holding queues, as a worker is on its
        queues' (kind ``reaper``: no queues, threads or wake-ups; a row kept by the
        heartbeat), so the workers' listing, the metrics and the dashboard show which
        reapers run, where, and their host's clock, which judges lease ends. Only a
        running reaper (``run()``); a database without queues is written nothing."""
        if self._lock_key is None:
            return
        if self.registration is None:
            registration = Registration(
                f"reaper:{socket.gethostname()[:55]}:{os.getpid()}:{self._lock_key[:8]}",
                self._lock_key, queues=[], concurrency=0, held=list, databases=[db],
                kind=ProcessKind.REAPER)
            registration.register(retried_by_heartbeat=True)  # else: the next beat
            self.registration = registration  # registered: the heartbeat thread beats it
        else:
            self.registration.add_database(db)

    def heartbeat(self) -> None:
        if self.registration is not None:
            self.registration.beat()

    def deregister(self) -> None:
        if self.registration is not None:
            self.registration.deregister()
        logger.info("Reaper stopped after %.1f s and %d passes",
                    time.monotonic() - self._started, self.passes)

    def once(self) -> ReapReport:
        """One pass, as ``djqueue_reaper --once`` runs it (from cron): after the clock
        comparison a long-running reaper makes as it starts. A database error is raised,
        so that the command fails."""
        self.clock_checks.check()
        return self.tick()

    def tick(self) -> ReapReport:
        self.passes += 1
        report = self.reap()
        if report:
            logger.info("Reaped: %s", report, extra={"report": vars(report)})
        return report

    def reap(self) -> ReapReport:
        """One pass over every database (the home one first)."""
        stats_due = time.monotonic() - self._last_stats >= get_settings().STATS_INTERVAL
        vacuum_due = time.monotonic() - self._last_vacuum_check >= VACUUM_CHECK_EVERY
        prune_due = time.monotonic() - self._last_prune >= PRUNE_EVERY
        now = time.monotonic()
        self._last_stats = now if stats_due else self._last_stats
        self._last_vacuum_check = now if vacuum_due else self._last_vacuum_check
        self._last_prune = now if prune_due else self._last_prune
        report = ReapReport()
        for db in placement.databases():
            if partitions.is_down(db):
                continue
            with dialects.using(db):
                try:
                    report.add(self._reap_database(db, stats_due, vacuum_due, prune_due))
                except DatabaseError as exc:
                    if partitions.unreachable(exc):
                        partitions.mark_down(db, exc)  # logged once, tried again soon
                        continue
                    self._pass_failures[db].failed(exc, "going on")
                    with contextlib.suppress(DatabaseError):
                        connections[db].close()
                else:
                    self._pass_failures[db].succeeded()
        if self.scheduler is not None:  # its rows are on the home database
            report.periodic = self._step("periodic tasks", self.scheduler.tick)
        self._step("drained partitions", partition_layout.drop_drained)
        return report

    def _reap_database(self, db: str, stats_due: bool, vacuum_due: bool,
                       prune_due: bool) -> ReapReport:
        report = ReapReport()
        for worker_id in self.dead_worker_finder.find(db):
            report.dead_workers += 1
            claims = Message.objects.claimed().filter(owner=worker_id)
            report.returned_from_dead += self._drain(claims, "worker {owner} died")
            # Rows the dead worker's last transactions still lock (the server has not
            # yet rolled them back) were skipped: keep the row, so the next pass
            # returns them, instead of leaving them to their lease's expiry.
            if not claims.using(db).exists():
                WorkerRecord.objects.using(db).filter(pk=worker_id).delete()
        if not Queue.objects.using(db).exists():  # nothing more to serve: write nothing
            return report
        self._present_on(db)
        report.expired = self._drain(
            Message.objects.expired(host_clock.database_now(db)), "lease expired (held by {owner})")
        report.promoted = self._step("promotion", promote_due)
        if stats_due:  # the expired go first, so the depths sampled leave them out
            report.past_expiry = self._step("expiry", self.sweep_expired)
            report.counted = self._step("statistics", rollups.roll_up)
            self._step("depth snapshot", rollups.sample_depth)
            report.alarms = self._step("alarms", lambda: len(alarms.evaluate()))
        if vacuum_due:
            self._step("vacuum and analyze", lambda: self._upkeep(db, report))
        if prune_due:
            report.pruned = self._step("pruning", prune_history)
            report.groups_repaired = self._step("ordered groups", self.repair_groups)
        return report

    def _upkeep(self, db: str, report: ReapReport) -> int:
        """PostgreSQL: start a vacuum or an analyze of a hot table if one is due (see
        djqueue.maintenance.vacuuming), counted in ``report``."""
        started = self.vacuuming.step(db)
        if started is None:
            return 0
        if started.statement == ANALYZE:
            report.analyzes += 1
        else:
            report.vacuums += 1
        return 1

    def _step(self, name: str, work: Callable[[], int]) -> int:
        """One step of a pass; an error in it is logged and the pass goes on (a database
        error closes the connection, so the next step starts on a fresh one)."""
        try:
            done = work()
        except Exception as exc:
            self._step_failures[name].failed(exc, "going on")
            if isinstance(exc, DatabaseError):
                with contextlib.suppress(DatabaseError):
                    connections[dialects.alias()].close()
            return 0
        self._step_failures[name].succeeded()
        return done

    @staticmethod
    def repair_groups() -> int:
        """Safety net for ordered queues and per-key concurrency: hand on groups left with
        free places (and take a raised ``group_concurrency`` into account)."""
        db = dialects.alias()
        ordered = list(Queue.objects.using(db).filter(
            Q(ordered=True) | Q(group_concurrency__isnull=False)).values_list("pk", flat=True))
        if not ordered:
            return 0
        with transaction.atomic(using=db):
            return ordered_groups.repair(db, ordered)

    @staticmethod
    def sweep_expired() -> int:
        """Set aside the expired messages at the head of each queue with a
        ``message_ttl``, and of each queue whose head stood still (its oldest ready
        message, at the last depth sample, had waited over ``STATS_INTERVAL``: paused,
        served by no worker, or behind a backlog), with
        djqueue.storage.expiry.sweep_head: so a queue no worker serves does not fill
        with expired messages, and senders its ``max_depth`` holds back can send again.
        A queue whose workers keep up is left to its claims, which set expired
        messages aside as they reach them, and costs nothing here. An error in one
        queue is counted on it and the others are still served."""
        db, total = dialects.alias(), 0
        now = host_clock.database_now(db)
        stood_still = now - timedelta(seconds=get_settings().STATS_INTERVAL)
        for queue_id in Queue.objects.using(db).filter(
                Q(message_ttl__isnull=False) | Q(depth__oldest_ready_at__lt=stood_still)
        ).values_list("pk", flat=True):
            try:
                total += expiry.sweep_head(db, queue_id, now)
            except Exception as exc:
                logger.exception("Reaper: the expiry of queue %s failed; going on", queue_id)
                queue_errors.note_error(queue_id, f"reaper: {type(exc).__name__}: {exc}")
        return total

    def _drain(self, query: QuerySet[Message], error: str) -> int:
        """Return the claims of ``query``, queue by queue: an error serving one queue
        (an absurd value in its row, say) is logged and counted on the queue
        (queue_errors.note_error), and the others are still served. A queue that got
        messages back wakes its idle receivers once each transaction commits, as a send
        does: each is a failure retried at once (djqueue.api.ready_wakeups)."""
        db = dialects.alias()
        total = 0
        for queue_id in sorted(set(query.using(db).values_list("queue_id", flat=True))):
            try:
                returned = self._drain_queue(query.filter(queue_id=queue_id), error)
            except Exception as exc:
                name = Queue.objects.using(db).filter(pk=queue_id).values_list(
                    "name", flat=True).first()
                logger.exception("Reaper: returning claims of queue %s failed; going on with "
                                 "the other queues", name, extra={"queue": name})
                queue_errors.note_error(queue_id, f"reaper: {type(exc).__name__}: {exc}")
                continue
            total += returned
        return total

    @staticmethod
    def _drain_queue(query: QuerySet[Message], error: str) -> int:
        total = 0
        while True:
            count = return_claims(query, error, RETURN_BATCH)
            total += count
            if count < RETURN_BATCH:
                return total

