"""Progress a handler reports while it runs, and the log records it emits, kept with its
message: through a real worker process, the API, the admin, and the task backend."""

from __future__ import annotations

import logging
import math
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import djqueue
from djqueue.exceptions import InvalidProgress, NotOwner
from djqueue.maintenance.pruning import prune_history
from djqueue.models import History, Message, MessageLog, MessageProgress, State
from djqueue.storage import handler_reports
from djqueue.worker import handler_logs
from tests import tasks
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_running_handlers_progress_and_its_log_records_through_a_worker(spawn, tmp_path,
                                                                          client, admin_theme):
    User.objects.create_superuser("ops", password="s3cret-pw")
    client.login(username="ops", password="s3cret-pw")
    djqueue.create_queue("t.report", max_attempts=3, backoff=[0.1])
    hold = tmp_path / "hold"
    sent = djqueue.send("t.report", {"n": 7, "hold": str(hold), "fail_on": [1]})
    worker = spawn("djqueue_worker", "t.report")

    progress = wait_until(lambda: djqueue.get_progress(sent.pk), 30, "the handler's report")
    # The handler is still waiting for the hold file: the report is seen while it runs.
    assert Message.objects.get(pk=sent.pk).state == State.CLAIMED
    assert (progress.fraction, progress.percent, progress.note, progress.attempt) == (
        0.4, 40, "resized 40 of 100", 1)
    page = client.get(f"/admin/djqueue/message/{sent.pk}/change/").content.decode()
    assert "data-percent='40'" in page and "resized 40 of 100" in page
    assert djqueue.get_logs(sent.pk) == []  # records are written when the run ends

    hold.touch()  # attempt 1 fails (its records are kept), attempt 2 succeeds
    wait_until(lambda: History.objects.filter(pk=sent.pk).exists(), 30, "the retry to finish")
    records = [(r.attempt, r.level_name, r.logger, r.text.splitlines()[0])
               for r in djqueue.get_logs(sent.pk)]
    assert records == [
        (1, "INFO", "tests.reporting", "resizing image 7"),
        (1, "WARNING", "tests.reporting", "the thumbnail of 7 is blurry"),
        (1, "ERROR", "tests.reporting", "could not save image 7"),
        (2, "INFO", "tests.reporting", "resizing image 7"),
        (2, "WARNING", "tests.reporting", "the thumbnail of 7 is blurry"),
        (2, "INFO", "tests.reporting", "saved image 7"),
    ]  # the DEBUG record is below HANDLER_LOG_LEVEL
    assert "OSError: disk full on attempt 1" in djqueue.get_logs(sent.pk)[2].text
    done = djqueue.get_progress(sent)
    assert (done.fraction, done.note, done.attempt) == (1.0, "done", 2)
    page = client.get(f"/admin/djqueue/history/{sent.pk}/change/").content.decode()
    assert "the thumbnail of 7 is blurry" in page and "OSError: disk full" in page
    assert "data-percent='100'" in page
    worker.stop()


def test_a_tasks_progress_and_logs_by_its_result_id(spawn):
    result = tasks.import_rows.enqueue(500)
    assert djqueue.task_progress(result.id) is None
    spawn("djqueue_worker", "default")
    wait_until(lambda: tasks.import_rows.get_result(result.id).is_finished, 30, "the task")
    progress = djqueue.task_progress(result.id)
    assert (progress.fraction, progress.note) == (1.0, "imported 500 of 500")
    assert [r.text for r in djqueue.task_logs(result.id)] == ["imported 500 rows"]
    assert djqueue.task_progress("not-a-result") is None
    assert djqueue.task_progress("²") is None  # a digit to str.isdigit, not to int()


def test_reports_within_the_interval_wait_for_the_next_write_or_the_end(settings):
    settings.DJQUEUE = {**settings.DJQUEUE, "PROGRESS_INTERVAL": 3600}
    djqueue.create_queue("reports")
    djqueue.send("reports", {"n": 1})
    [message] = djqueue.receive("reports", visibility_timeout=60)
    with handler_reports.reporting(message):
        message.progress(0.1, "first")  # written: nothing was written yet
        message.progress(0.2, "second")  # kept: within the interval
        message.progress(0.3, "third")
        assert (djqueue.get_progress(message).fraction, djqueue.get_progress(message).note) == (
            0.1, "first")
    # the run ended: the last report is written
    assert djqueue.get_progress(message.pk).note == "third"
    with handler_reports.reporting(message):
        message.progress(0.5)
        message.progress(1)  # completion is never held back
        assert djqueue.get_progress(message).fraction == 1.0
    assert MessageProgress.objects.count() == 1


def test_a_delivery_that_lost_its_lease_cannot_report(settings):
    djqueue.create_queue("reports")
    djqueue.send("reports", {"n": 1})
    [stale] = djqueue.receive("reports", visibility_timeout=60)
    stale.nack()  # released: the next receive is a new delivery
    [fresh] = djqueue.receive("reports", visibility_timeout=60)
    fresh.progress(0.7, "the new delivery")
    with pytest.raises(NotOwner):
        stale.progress(0.1, "late")
    with handler_reports.reporting(stale), pytest.raises(NotOwner):
        stale.progress(0.2)  # a run's first report is written at once
    progress = djqueue.get_progress(fresh)
    assert (progress.fraction, progress.note, progress.attempt) == (
        0.7, "the new delivery", fresh.attempts)
    assert fresh.lease_token != stale.lease_token


@pytest.mark.parametrize("fraction, note, wanted", [
    (1.5, "", "from 0 to 1"), (-0.1, "", "from 0 to 1"), (math.nan, "", "from 0 to 1"),
    (math.inf, "", "from 0 to 1"), (True, "", "from 0 to 1"), ("0.5", "", "from 0 to 1"),
    (None, "", "from 0 to 1"), (0.5, "x" * 201, "at most 200 characters"),
    (0.5, "a\x00b", "without NUL"), (0.5, b"bytes", "must be text"),
])
def test_a_bad_report_gets_a_specific_error_and_changes_nothing(fraction, note, wanted):
    djqueue.create_queue("reports")
    djqueue.send("reports", {"n": 1})
    [message] = djqueue.receive("reports")
    # Refused before any round trip to the database: in the time of the checks alone.
    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidProgress,
                                                                      match=wanted):
        message.progress(fraction, note)
    assert not queries.captured_queries
    assert not MessageProgress.objects.exists()
    with pytest.raises(InvalidProgress, match="outside a handler"):
        djqueue.report_progress(0.5)


def test_kept_records_are_bounded_in_count_and_size(settings):
    settings.DJQUEUE = {**settings.DJQUEUE, "HANDLER_LOG_RECORDS": 5,
                        "HANDLER_LOG_CHARS": 100, "HANDLER_LOG_LEVEL": "WARNING"}
    handler_logs.install()
    djqueue.create_queue("reports")
    djqueue.send("reports", {"n": 1})
    [message] = djqueue.receive("reports")
    log = logging.getLogger("tests.bounded")
    log.setLevel(logging.DEBUG)
    try:
        log.warning("before the run: not kept")
        with handler_reports.reporting(message):
            log.info("below the level: not kept")
            log.warning("x" * 5000)
            log.error("null \x00 byte")
            for i in range(10):
                log.warning("record %d", i)
    finally:
        log.setLevel(logging.NOTSET)
        settings.DJQUEUE = {**settings.DJQUEUE, "HANDLER_LOG_LEVEL": "INFO"}
        handler_logs.install()
    texts = [r.text for r in djqueue.get_logs(message)]
    assert len(texts) == 5
    assert texts[0] == "x" * 100 + "… (4900 more characters cut)"
    assert texts[1] == "null \\x00 byte"
    assert texts[2:4] == ["record 0", "record 1"]
    assert texts[4].startswith("8 more log record(s) dropped")


def test_reports_are_pruned_with_the_queues_retention():
    handler_logs.install()  # as a worker does at start
    djqueue.create_queue("reports", retention=60)
    djqueue.send("reports", {"n": 1})
    [message] = djqueue.receive("reports")
    with handler_reports.reporting(message):
        message.progress(0.5, "half")
        logging.getLogger("tests.pruned").warning("kept until the retention ends")
    message.ack()
    assert MessageLog.objects.count() == 1 and MessageProgress.objects.count() == 1
    prune_history(timezone.now() + timedelta(seconds=30))
    assert MessageLog.objects.count() == 1 and MessageProgress.objects.count() == 1
    prune_history(timezone.now() + timedelta(seconds=61))
    assert not MessageLog.objects.exists() and not MessageProgress.objects.exists()


def test_a_held_back_report_of_a_lease_lost_meanwhile_is_dropped(settings):
    settings.DJQUEUE = {**settings.DJQUEUE, "PROGRESS_INTERVAL": 3600}
    djqueue.create_queue("reports")
    djqueue.send("reports", {"n": 1})
    [message] = djqueue.receive("reports")
    with handler_reports.reporting(message):
        message.progress(0.1, "written")
        message.progress(0.2, "held back")
        message.nack()  # the lease ends before the run does
    assert djqueue.get_progress(message).note == "written"
