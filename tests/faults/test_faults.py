"""Short forms of the soak's fault scenarios (``make soak`` runs the full sizes).

Each runs real producer, worker and reaper processes against the private MariaDB
and accounts for every message: lost must be 0.
"""

from __future__ import annotations

import pytest

from tests.faults import scenarios
from tests.faults.harness import Report

pytestmark = pytest.mark.faults


def check(report: Report) -> None:
    print(report.row())
    assert report.lost == 0, report.row()
    assert report.notes.get("left_pending", 0) == 0, report.row()
    assert not report.notes.get("timed_out"), report.row()
    assert report.notes.get("finished_without_effect", 0) == 0, report.row()


def test_worker_kill_storm(cluster):
    report = scenarios.worker_kill_storm(cluster, count=50_000, rate=2_500)
    check(report)
    assert len(report.faults) >= 5
    assert all(f.recovery is not None for f in report.faults), report.faults
    # At-least-once: only what killed workers held can run twice (each held <= 4 + 20).
    assert report.duplicates <= 24 * len(report.faults)


def test_database_crash_twice(cluster):
    report = scenarios.database_crash(cluster, count=20_000, rate=1_000)
    check(report)
    assert [f.kind for f in report.faults] == ["database kill -9"] * 2
    assert all(f.recovery is not None for f in report.faults), report.faults
    assert report.send_errors > 0  # the producers saw the outages as exceptions


def test_connection_kills(cluster):
    report = scenarios.connection_drops(cluster, count=20_000, rate=1_500)
    check(report)
    assert len(report.faults) >= 5
    assert all(f.recovery is not None for f in report.faults), report.faults


def test_slow_handlers_past_their_lease(cluster):
    report = scenarios.slow_handlers(cluster, count=8)
    assert report.lost == 0 and report.notes["history_rows"] == 8, report.row()
    assert report.notes["extended_ran_once"] == 4, report.row()
    assert report.notes["unextended_redelivered"] == 4, report.row()
    # Each first owner's late ack is refused (and any later owner's that also overran).
    assert report.notes["late_acks_refused"] >= 4, report.row()


def test_exactly_once_under_kill_storm(cluster):
    report = scenarios.exactly_once_storm(cluster, count=15_000, rate=1_500)
    check(report)
    assert report.duplicates == 0
    assert report.notes["effects"] == report.notes["distinct_effects"] == 15_000


def test_poison_messages(cluster):
    report = scenarios.poison_messages(cluster, good=1_000, poison_each=4)
    assert report.notes["worker_survived"], report.row()
    assert report.lost == 0 and report.notes["good_finished"] == 1_000, report.row()
    assert report.dead_lettered == 12 and report.notes["dead_with_expected_error"] == 12, report.row()
