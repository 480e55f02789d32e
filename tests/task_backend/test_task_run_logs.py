"""The Tasks framework's INFO records of each run: not made in a worker process while no
handler would write them, written as before once one would (djqueue.tasks.task_run_logs)."""

import contextlib
import logging
import signal

import pytest
from django.utils.log import RequireDebugFalse, RequireDebugTrue

from djqueue.models import TaskRecord, TaskStatus
from djqueue.tasks import task_run_logs
from djqueue.tasks.compat import task_run_logger
from djqueue.worker import handler_logs
from tests import tasks
from tests.conftest import wait_until


@contextlib.contextmanager
def project_logging():
    """The test project's logging, without pytest's handlers on the root for a while
    (they take every record, so a record would reach them), and with the worker's
    capture of handler logs installed, as in a worker process."""
    root = logging.getLogger()
    pytests = [h for h in root.handlers if type(h).__module__.startswith("_pytest")]
    for handler in pytests:
        root.removeHandler(handler)
    handler_logs.install()
    try:
        yield
    finally:
        for handler in pytests:
            root.addHandler(handler)


@pytest.fixture(autouse=True)
def level_left_alone():
    """Whatever a test did, the logger is as the project configured it afterwards."""
    yield
    task_run_logs.stop_following()
    task_run_logger.setLevel(logging.NOTSET)


class Collected(logging.Handler):
    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_djangos_default_handlers_without_debug_write_no_info_record(settings):
    # The test project's logging: Django's defaults below its own (console under DEBUG,
    # mail at ERROR), the root at INFO with the worker's capture, which skips these records.
    settings.DEBUG = False
    with project_logging():
        assert task_run_logs.info_reaches_no_handler(task_run_logger)
        settings.DEBUG = True
        # Django's console handler (on the "django" logger) writes them; the backport's
        # logger, "django_tasks", is not below it.
        below_django = task_run_logger.name.startswith("django.")
        assert task_run_logs.info_reaches_no_handler(task_run_logger) is not below_django
    settings.DEBUG = False  # pytest's handlers take every record: the level stays
    assert not task_run_logs.info_reaches_no_handler(task_run_logger)


@pytest.mark.parametrize("make_handler", [
    lambda: Collected(),  # no level, no filter
    lambda: Collected(logging.INFO),
    lambda: _filtered(lambda record: True),  # a filter that is not Django's DEBUG filter
    lambda: _filtered(RequireDebugFalse()),  # passes with DEBUG off
])
def test_a_handler_that_may_write_or_see_an_info_record_counts(settings, make_handler):
    settings.DEBUG = False
    with project_logging():
        handler = make_handler()
        task_run_logger.addHandler(handler)
        try:
            assert not task_run_logs.info_reaches_no_handler(task_run_logger)
        finally:
            task_run_logger.removeHandler(handler)
        for quiet in (Collected(logging.WARNING), _filtered(RequireDebugTrue())):
            task_run_logger.addHandler(quiet)
            try:
                assert task_run_logs.info_reaches_no_handler(task_run_logger)
            finally:
                task_run_logger.removeHandler(quiet)


def _filtered(record_filter) -> logging.Handler:
    handler = Collected()
    handler.addFilter(record_filter)
    return handler


def test_a_logger_filter_or_a_logger_below_leaves_the_level_alone(settings):
    settings.DEBUG = False
    with project_logging():
        seen = []
        task_run_logger.addFilter(seen.append)
        try:
            assert not task_run_logs.info_reaches_no_handler(task_run_logger)
        finally:
            task_run_logger.removeFilter(seen.append)
        child = logging.getLogger(task_run_logger.name + ".below")
        try:
            assert not task_run_logs.info_reaches_no_handler(task_run_logger)
        finally:
            del logging.Logger.manager.loggerDict[child.name]
        assert task_run_logs.info_reaches_no_handler(task_run_logger)


def test_following_raises_the_level_and_takes_it_back_off_once_a_handler_would_write(
        settings, monkeypatch):
    settings.DEBUG = False
    with project_logging():
        monkeypatch.setattr(task_run_logs, "RECHECK", 0.0)  # every recheck() checks at once
        assert task_run_logger.level == logging.NOTSET
        task_run_logs.follow()
        assert task_run_logger.level == logging.WARNING
        assert not task_run_logger.isEnabledFor(logging.INFO)
        assert task_run_logger.isEnabledFor(logging.ERROR)  # failed runs still log

        handler = Collected()
        task_run_logger.addHandler(handler)
        try:
            task_run_logs.recheck()
            assert task_run_logger.level == logging.NOTSET
            task_run_logger.info("Task id=%s state=%s", "x", "RUNNING")
            assert handler.messages == ["Task id=x state=RUNNING"]
        finally:
            task_run_logger.removeHandler(handler)
        task_run_logs.recheck()
        assert task_run_logger.level == logging.WARNING

        task_run_logger.setLevel(logging.INFO)  # logging configured again: its level stands
        task_run_logs.recheck()
        assert task_run_logger.level == logging.INFO
        task_run_logger.setLevel(logging.NOTSET)
        task_run_logs.recheck()
        assert task_run_logger.level == logging.WARNING  # raised again
        # Configured again within the second before the stop: the project's level stands.
        task_run_logger.setLevel(logging.ERROR)
        task_run_logs.stop_following()
        assert task_run_logger.level == logging.ERROR
        task_run_logger.setLevel(logging.NOTSET)
        task_run_logs.follow()
        task_run_logs.stop_following()
        assert task_run_logger.level == logging.NOTSET


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("file_handler", [False, True])
def test_a_worker_process_makes_the_records_exactly_where_a_handler_takes_them(
        spawn, tmp_path, file_handler):
    # Django's default handlers with DEBUG off: the run records are not made. A file
    # handler on the logger: every run's start and end is written.
    path = tmp_path / "task-runs.log"
    level = tasks.task_run_log_level.enqueue()
    results = [tasks.add.enqueue(n, n) for n in range(20)]
    env = {"DJANGO_DEBUG": "0"}
    if file_handler:
        env["DJQUEUE_TEST_TASK_RUN_LOG"] = str(path)
    worker = spawn("djqueue_worker", "default", env=env)
    wait_until(lambda: TaskRecord.objects.filter(
        status=TaskStatus.SUCCESSFUL, pk__in=[r.id for r in [level, *results]]).count() == 21,
        60, "the tasks to finish")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    level.refresh()
    if not file_handler:
        assert level.return_value == logging.WARNING
        return
    assert level.return_value == logging.INFO
    lines = path.read_text().splitlines()
    for result in results:
        mine = [line for line in lines if f"id={result.id} " in line]
        assert [line.rsplit("state=", 1)[1] for line in mine] == ["RUNNING", "SUCCESSFUL"]
