"""Pruning: what is past its retention leaves the database, in batches by primary key.

Run by the reaper once every PRUNE_EVERY seconds; each batch is its own short
statement, so a large backlog of expired rows never holds a long transaction.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from djqueue.api.topics import collect_bodies
from djqueue.conf import get_settings
from djqueue.maintenance import queue_errors
from djqueue.models import (
    FINISHED_STATUSES,
    Alarm,
    ExportRun,
    History,
    Message,
    MessageGroup,
    MessageLog,
    MessageProgress,
    PeriodicTick,
    Queue,
    StepDependency,
    TaskRecord,
    TraceEvent,
    Workflow,
    WorkflowState,
    WorkflowStep,
)
from djqueue.monitoring import rollups
from djqueue.storage import dedup, dialects, host_clock

logger = logging.getLogger("djqueue.reaper")


def prune_history(now: datetime | None = None) -> int:
    """Delete what is past retention, in batches by primary key: history, trace, handler
    log records and progress (per queue's retention), finished task results, ended
    workflows, periodic ticks and export watermarks (RESULT_RETENTION), fired alarms
    (ALARM_RETENTION)."""
    db = dialects.alias()
    now = now or host_clock.database_now(db)
    removed = 0
    for queue in Queue.objects.using(db).only("pk", "name", "retention"):
        try:
            removed += _prune_queue(db, queue, now)
        except Exception as exc:  # one queue's absurd row must not stop the others
            logger.exception("Pruning queue %s failed; going on with the other queues",
                             queue.name, extra={"queue": queue.name})
            queue_errors.note_error(queue.pk, f"pruning: {type(exc).__name__}: {exc}")
    removed += dedup.prune(db, now)
    removed += rollups.prune(db, now)
    removed += collect_bodies(now)
    cutoff = now - timedelta(seconds=get_settings().RESULT_RETENTION)
    removed += _delete_in_batches(TaskRecord.objects.using(db).filter(
        status__in=FINISHED_STATUSES, finished_at__lt=cutoff))
    removed += _delete_in_batches(PeriodicTick.objects.using(db).filter(tick_at__lt=cutoff))
    removed += _prune_workflows(db, cutoff)
    removed += _delete_in_batches(_superseded_export_runs(db, cutoff))
    alarms_cutoff = now - timedelta(seconds=get_settings().ALARM_RETENTION)
    removed += _delete_in_batches(Alarm.objects.using(db).filter(fired_at__lt=alarms_cutoff))
    return removed


def _prune_queue(db: str, queue: Queue, now: datetime) -> int:
    cutoff = now - timedelta(seconds=queue.retention_seconds())
    removed = _delete_in_batches(History.objects.using(db).filter(
        queue_id=queue.pk, finished_at__lt=cutoff))
    removed += _delete_in_batches(TraceEvent.objects.using(db).filter(
        queue_id=queue.pk, at__lt=cutoff))
    removed += _delete_in_batches(MessageLog.objects.using(db).filter(
        queue_id=queue.pk, logged_at__lt=cutoff))
    removed += _delete_in_batches(MessageProgress.objects.using(db).filter(
        queue_id=queue.pk, updated_at__lt=cutoff))
    return removed + _delete_in_batches(MessageGroup.objects.using(db).filter(
        queue_id=queue.pk, touched_at__lt=cutoff).exclude(
        Exists(Message.objects.filter(queue_id=OuterRef("queue_id"), group_key=OuterRef("key")))))


#: The states in which a workflow has ended.
ENDED_WORKFLOWS = (WorkflowState.SUCCEEDED, WorkflowState.FAILED, WorkflowState.CANCELLED)


def _prune_workflows(db: str, cutoff: datetime) -> int:
    """Workflows that ended before ``cutoff``, with their steps and edges: a transaction
    for each batch of workflows holding about PRUNE_BATCH steps (one workflow of more
    steps is a batch of its own). Its end is checked again under the row's lock, so a
    retry begun meanwhile (RUNNING again) keeps its workflow. ``created_at`` bounds the
    range read from the (state, created_at) index: a workflow ends after it began."""
    ended = Workflow.objects.using(db).filter(
        state__in=ENDED_WORKFLOWS, created_at__lt=cutoff, finished_at__lt=cutoff)
    batch = get_settings().PRUNE_BATCH
    removed = 0
    while True:
        ids: list[int] = []
        steps = 0
        for pk, steps_total in ended.values_list("pk", "steps_total")[:batch]:
            if ids and steps + steps_total > batch:
                break
            ids.append(pk)
            steps += steps_total
        if not ids:
            return removed
        with transaction.atomic(using=db):
            doomed = list(ended.filter(pk__in=ids).select_for_update()
                          .values_list("pk", flat=True))
            StepDependency.objects.using(db).filter(workflow_id__in=doomed).delete()
            WorkflowStep.objects.using(db).filter(workflow_id__in=doomed).delete()
            Workflow.objects.using(db).filter(pk__in=doomed).delete()
        removed += len(doomed)


def _superseded_export_runs(db: str, cutoff: datetime) -> QuerySet:
    """Incremental exports' runs that finished before ``cutoff`` and are not their
    target's newest: the newest one's end is where the next run begins, however old."""
    newer = ExportRun.objects.filter(target=OuterRef("target"),
                                     window_end__gt=OuterRef("window_end"))
    return ExportRun.objects.using(db).filter(finished_at__lt=cutoff).filter(Exists(newer))


def _delete_in_batches(query: QuerySet) -> int:
    batch = get_settings().PRUNE_BATCH
    removed = 0
    while True:
        ids = list(query.values_list("pk", flat=True)[:batch])
        if ids:
            query.model.objects.using(query.db).filter(pk__in=ids).delete()
        removed += len(ids)
        if len(ids) < batch:
            return removed
