"""A long-running reaper registers as a process of kind ``reaper`` (a row kept by a
heartbeat, no queues) on each database holding queues, so which reapers run, and
where, is seen where the workers are: ``djqueue_workers``, the metrics
(``djqueue_worker_up{kind="reaper"}``, for an alert when none runs) and the
dashboard. A database without queues is written nothing (the placement tests'
home database). Its row goes as it stops; a killed reaper's
row is removed by the next reaper's pass, as a dead worker's is. A reaper run with
``--once`` does not register. Real processes and real signals."""

from __future__ import annotations

import signal
from io import StringIO

import pytest
from django.core.management import call_command

import djqueue
from djqueue.maintenance.reaper import Reaper
from djqueue.models import ProcessKind, Worker
from tests.conftest import wait_until
from tests.monitoring.test_metrics import scrape

pytestmark = pytest.mark.django_db(transaction=True)


def reaper_rows() -> list[Worker]:
    return list(Worker.objects.filter(kind=ProcessKind.REAPER))


def test_a_running_reaper_is_listed_as_a_process_of_its_own_kind(spawn, client):
    djqueue.create_queue("t.record")
    once = spawn("djqueue_reaper", "--once")
    assert once.wait(60) == 0 and reaper_rows() == [], once.output()

    reaper = spawn("djqueue_reaper")
    [row] = wait_until(reaper_rows, 60, "the reaper's row")
    assert row.id.startswith("reaper:") and row.pid == reaper.pid, row.id
    assert (row.queues, row.concurrency, row.wake_address) == ([], 0, "")
    beat = row.heartbeat_at
    wait_until(lambda: Worker.objects.get(pk=row.pk).heartbeat_at > beat, 30, "a heartbeat")

    table = StringIO()
    call_command("djqueue_workers", stdout=table)
    [line] = [line for line in table.getvalue().splitlines() if row.id in line]
    assert line.split()[1:4] == ["reaper", "-", "0"], line
    up = {dict(labels)["worker"]: dict(labels)["kind"] for (name, labels), value
          in scrape(client).items() if name == "djqueue_worker_up" and value == 1.0}
    assert up == {row.id: "reaper"}, up

    reaper.signal(signal.SIGTERM)
    assert reaper.wait(60) == 0, reaper.output()
    assert reaper_rows() == []


def test_a_killed_reapers_row_is_removed_by_the_next_reapers_pass(spawn):
    djqueue.create_queue("t.record")
    reaper = spawn("djqueue_reaper")
    [row] = wait_until(reaper_rows, 60, "the reaper's row")
    reaper.signal(signal.SIGKILL)
    reaper.popen.wait(10)
    # Its process is gone on this host: the next pass judges it dead at once.
    report = Reaper().tick()
    assert report.dead_workers == 1 and report.returned_from_dead == 0, report
    assert not Worker.objects.filter(pk=row.pk).exists()

