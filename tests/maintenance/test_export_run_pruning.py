"""Incremental exports' watermark rows leave after RESULT_RETENTION, except each
target's newest: the next run of that target begins where it ended, however old."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from djqueue.conf import get_settings
from djqueue.maintenance.pruning import prune_history
from djqueue.models import ExportRun

pytestmark = pytest.mark.django_db(transaction=True)


def test_old_export_runs_are_pruned_but_each_targets_newest_stays(settings):
    settings.DJQUEUE = {**settings.DJQUEUE, "PRUNE_BATCH": 2}  # several batches
    now = timezone.now()
    retention = timedelta(seconds=get_settings().RESULT_RETENTION)
    old = now - retention - timedelta(hours=1)

    def run(target: str, hours_before: int, finished_at) -> int:
        end = now - timedelta(hours=hours_before)
        row = ExportRun.objects.create(target=target, window_start=end - timedelta(hours=1),
                                       window_end=end)
        ExportRun.objects.filter(pk=row.pk).update(finished_at=finished_at)
        return row.pk

    hourly = [run("/data/hourly", h, old) for h in range(200, 195, -1)]
    recent = run("/data/hourly", 1, now)  # the newest, within retention
    stale = [run("/data/stopped", h, old) for h in (300, 299, 298)]  # no run since

    assert prune_history(now) >= len(hourly) + 2

    left = set(ExportRun.objects.values_list("pk", flat=True))
    assert left == {recent, stale[-1]}
    # The stopped target's next run still begins where its last one ended.
    newest = ExportRun.objects.filter(target="/data/stopped").order_by("-window_end").first()
    assert newest is not None and newest.window_end == now - timedelta(hours=298)
    # Much later, each target's newest run still stays.
    prune_history(now + retention * 10)
    assert set(ExportRun.objects.values_list("pk", flat=True)) == left
