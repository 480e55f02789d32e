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
        #: The exception each record carries (its exc_info), or None.
        self.exceptions: list[BaseException | None] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.exceptions.append(record.exc_info[1] if record.exc_info else None)


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


@pytest.fixture
def only_djangos_receivers():
    """The test project's own receivers of the task signals (tests.signal_log) left out
    for a while, so that only the framework's logging receivers listen."""
    from djqueue.tasks.compat import task_enqueued, task_finished, task_started
    from tests import signal_log

    for name, sent in (("enqueued", task_enqueued), ("started", task_started),
                       ("finished", task_finished)):
        sent.disconnect(dispatch_uid=f"tests-{name}")
    yield
    signal_log.connect()


class Sends:
    """Counts the sends of a signal, keeping them (an attribute on the signal object)."""

    def __init__(self, signal, monkeypatch) -> None:
        self.count, self._send = 0, signal.send
        monkeypatch.setattr(signal, "send", self)

    def __call__(self, *args, **kwargs):
        self.count += 1
        return self._send(*args, **kwargs)


def test_a_runs_signals_are_unheard_only_while_held_back_and_only_djangos_receivers_listen(
        settings, monkeypatch, only_djangos_receivers):
    from djqueue.storage import fastpath
    from djqueue.tasks.backend import QueueBackend
    from djqueue.tasks.compat import task_finished

    settings.DEBUG = False
    with project_logging():
        monkeypatch.setattr(task_run_logs, "RECHECK", 0.0)
        assert not task_run_logs.runs_unheard(QueueBackend)  # not following: sent
        task_run_logs.follow()
        assert task_run_logs.runs_unheard(QueueBackend)

        heard = []

        def listener(sender, task_result, **kwargs):
            heard.append(task_result)

        task_finished.connect(listener, sender=QueueBackend)
        try:
            task_run_logs.recheck()
            assert not task_run_logs.runs_unheard(QueueBackend)
            assert task_run_logs.runs_unheard(object)  # a receiver of another sender only
        finally:
            task_finished.disconnect(listener, sender=QueueBackend)
        task_run_logs.recheck()
        assert task_run_logs.runs_unheard(QueueBackend)

        handler = Collected()  # a handler that writes the INFO records: they are sent
        task_run_logger.addHandler(handler)
        try:
            task_run_logs.recheck()
            assert not task_run_logs.runs_unheard(QueueBackend)
        finally:
            task_run_logger.removeHandler(handler)
        task_run_logs.recheck()
        assert task_run_logs.runs_unheard(QueueBackend)

        monkeypatch.setattr(fastpath.verified, "enabled", False)  # an unverified Django: sent
        task_run_logs.recheck()
        assert not task_run_logs.runs_unheard(QueueBackend)


@pytest.mark.parametrize("quiet", [
    lambda: task_run_logger.setLevel(logging.WARNING),
    lambda: setattr(task_run_logger, "disabled", True),
], ids=["level", "disabled"])
def test_a_run_is_unheard_where_the_projects_own_logging_keeps_info_records_unmade(
        settings, monkeypatch, only_djangos_receivers, quiet):
    """The project's LOGGING quiets the framework's logger: a worker does not send a
    successful run's signals even though a handler that would write INFO is there
    (no record is made for it), and sends them again once the logger takes INFO."""
    from djqueue.tasks.backend import QueueBackend

    settings.DEBUG = False
    monkeypatch.setattr(task_run_logger, "disabled", False)
    with project_logging():
        monkeypatch.setattr(task_run_logs, "RECHECK", 0.0)
        handler = Collected()  # would write every record that is made
        task_run_logger.addHandler(handler)
        try:
            quiet()
            assert not task_run_logs.runs_unheard(QueueBackend)  # not a worker: sent
            task_run_logs.follow()
            assert task_run_logger.level in (logging.NOTSET, logging.WARNING)
            assert task_run_logs.runs_unheard(QueueBackend)
            task_run_logger.info("Task id=%s state=%s", "x", "RUNNING")
            assert handler.messages == []
            task_run_logger.disabled = False
            task_run_logger.setLevel(logging.INFO)  # configured again: the records are made
            assert not task_run_logs.runs_unheard(QueueBackend)
            task_run_logs.stop_following()
            task_run_logger.setLevel(logging.WARNING)
            assert not task_run_logs.runs_unheard(QueueBackend)  # no longer a worker
        finally:
            task_run_logger.removeHandler(handler)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("as_under_a_worker", [True, False])
def test_unheard_runs_are_recorded_as_before_and_a_failure_still_logs_its_error(
        settings, monkeypatch, only_djangos_receivers, as_under_a_worker):
    """A successful run sends neither signal and its record is the same; a failed run's
    ``task_finished`` still goes out, and Django's receiver logs it at ERROR."""
    from djqueue.api.receiving import receive
    from djqueue.storage.claims import ack_and_claim
    from djqueue.tasks.compat import TaskResultStatus, task_finished, task_started
    from djqueue.tasks.task_handler import in_claim_transaction, run_task
    from djqueue.worker import registry

    settings.DEBUG = False
    with project_logging():
        task_run_logs.follow()
        errors = Collected(logging.ERROR)  # takes no INFO record: they stay held back
        task_run_logger.addHandler(errors)
        try:
            task_run_logs.recheck()
            started, finished = Sends(task_started, monkeypatch), Sends(task_finished, monkeypatch)
            added, failing, aware = (tasks.add.enqueue(2, 3), tasks.explode.enqueue(),
                                     tasks.which_attempt.enqueue("m"))
            held = receive("default", max_messages=3, owner="w1")
            assert len(held) == 3
            for message in held:
                with registry.hook_runs_after() if as_under_a_worker else contextlib.nullcontext():
                    run_task(message)
            if as_under_a_worker:
                ack_and_claim(held, [], 0, owner="w1", hook=in_claim_transaction)
        finally:
            task_run_logger.removeHandler(errors)
    assert (started.count, finished.count) == (0, 1)  # only the failure's end
    assert [m for m in errors.messages if "state=FAILED" in m] == [
        next(m for m in errors.messages if f"id={failing.id} " in m)]
    # ... with the task's exception, whose traceback the log shows (it was sent after
    # the except block, where Django's receiver found no exception to log).
    [raised] = [e for m, e in zip(errors.messages, errors.exceptions, strict=True)
                if "state=FAILED" in m]
    assert isinstance(raised, KeyError) and raised.args == ("missing thing",), raised
    done = tasks.add.get_result(added.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 5)
    context_run = tasks.which_attempt.get_result(aware.id)  # its context had its result
    assert context_run.status == TaskResultStatus.SUCCESSFUL
    assert context_run.return_value["marker"] == "m"
    assert context_run.return_value["id"] == aware.id
    assert tasks.explode.get_result(failing.id).status == TaskResultStatus.FAILED
