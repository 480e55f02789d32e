"""System checks report configuration mistakes with stable ids."""

import gc

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from djqueue.processes.garbage_collection import collected_less
from djqueue.worker import registry
from tests import handlers


def ids(**kwargs) -> set[str]:
    """The configuration checks' ids; the database checks (which connect, with ``check
    --database``) have their own tests, e.g. tests/maintenance/test_vacuuming.py."""
    return {m.id for m in run_checks(tags=["djqueue"], databases=[], **kwargs)}


def test_default_configuration_is_clean():
    assert ids() == set()


def test_unknown_setting_is_e001():
    with override_settings(DJQUEUE={"HANDLER": {}}):
        assert ids() == {"djqueue.E001"}


@pytest.mark.parametrize("interval", [0, -1, 2, "fast", True])
def test_bad_worker_switch_interval_is_e001(interval):
    with override_settings(DJQUEUE={"WORKER_SWITCH_INTERVAL": interval}):
        messages = run_checks(tags=["djqueue"], databases=[])
    assert [m.id for m in messages] == ["djqueue.E001"]
    assert "WORKER_SWITCH_INTERVAL" in messages[0].msg


@pytest.mark.parametrize("rescan", [-0.1, 61, "soon", True, None])
def test_bad_claim_rescan_is_e001(rescan):
    with override_settings(DJQUEUE={"CLAIM_RESCAN": rescan}):
        messages = run_checks(tags=["djqueue"], databases=[])
    assert [m.id for m in messages] == ["djqueue.E001"]
    assert "CLAIM_RESCAN" in messages[0].msg


@pytest.mark.parametrize(("name", "value"), [
    ("AUTO_CREATE_QUEUES", "False"), ("AUTO_CREATE_QUEUES", 1), ("TRACING", "no"),
    ("TRACING", None), ("WAKE_HOST", ""), ("WAKE_HOST", 5), ("DATABASE", ["default"]),
    ("DATABASE", None), ("HANDLERS", ["jobs"]), ("PERIODIC", "beat"),
])
def test_a_setting_of_the_wrong_kind_is_e001(name, value):
    """A string "False" for a flag read as true, and a list for a dict or an alias was a
    TypeError inside a later check."""
    with override_settings(DJQUEUE={name: value}):
        messages = run_checks(tags=["djqueue"], databases=[])
    assert [m.id for m in messages] == ["djqueue.E001"]
    assert name in messages[0].msg


def test_worker_switch_interval_applies_while_the_worker_runs():
    import sys

    from djqueue.processes.thread_switch import switch_interval

    before = sys.getswitchinterval()
    with switch_interval(0.0005):
        assert sys.getswitchinterval() == 0.0005
    assert sys.getswitchinterval() == before
    with switch_interval(None):
        assert sys.getswitchinterval() == before


@pytest.mark.parametrize("threshold", [0, 99, 10**8, 2.5, "often", True])
def test_bad_worker_gc_threshold_is_e001(threshold):
    with override_settings(DJQUEUE={"WORKER_GC_THRESHOLD": threshold}):
        messages = run_checks(tags=["djqueue"], databases=[])
    assert [m.id for m in messages] == ["djqueue.E001"]
    assert "WORKER_GC_THRESHOLD" in messages[0].msg


def test_collected_less_freezes_and_gives_everything_back():
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with collected_less(50_000):
        assert gc.get_threshold() == (50_000, *before[1:])
        assert gc.get_freeze_count() > frozen
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen
    with collected_less(None):
        assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_collected_less_honours_a_threshold_below_pythons():
    before = gc.get_threshold()
    with collected_less(500):
        assert gc.get_threshold() == (500, *before[1:])
    assert gc.get_threshold() == before


def test_collected_less_nested_gives_back_only_when_the_last_stops():
    """Two workers in one process: the first to stop leaves the second's collector alone."""
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with collected_less(30_000):
        with collected_less(40_000):
            assert gc.get_threshold() == (40_000, *before[1:])
        assert gc.get_threshold() == (40_000, *before[1:])
        assert gc.get_freeze_count() > frozen, "still frozen while one worker runs"
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_unknown_database_alias_is_e002():
    with override_settings(DJQUEUE={"DATABASE": "elsewhere"}):
        assert ids() == {"djqueue.E002"}


def test_handler_that_does_not_import_is_e003():
    with override_settings(DJQUEUE={"HANDLERS": {"jobs": "tests.handlers.nothing_here"}}):
        assert ids() == {"djqueue.E003"}


@pytest.mark.parametrize("queue", ["", "bad name!", "x" * 101])
def test_a_handler_for_what_is_no_queue_name_is_e003(queue):
    with override_settings(DJQUEUE={"HANDLERS": {queue: "tests.handlers.record"}}):
        assert ids() == {"djqueue.E003"}


@pytest.mark.parametrize("spec", [
    {"handler": "tests.handlers.record_windowed", "batch": 0},
    {"handler": "tests.handlers.record_windowed", "batch_wait": 2},
    {"handler": "tests.handlers.record_windowed", "batch": 5, "exactly_once": True},
    {"handler": "tests.handlers.record_windowed", "batch": 5, "bacth_wait": 2},
    {"path": "tests.handlers.record_windowed"},
    ["tests.handlers.record_windowed"],
])
def test_handler_options_that_do_not_hold_are_e003(spec):
    with override_settings(DJQUEUE={"HANDLERS": {"jobs": spec}}):
        assert ids() == {"djqueue.E003"}


def test_a_batch_handler_from_the_settings_has_its_options():
    spec = {"handler": "tests.handlers.record", "batch": 25, "batch_wait": 1.5}
    with override_settings(DJQUEUE={"HANDLERS": {"jobs": spec}}):
        assert ids() == set()
        entry = registry.resolve("jobs")
    assert (entry.func, entry.batch, entry.batch_wait, entry.exactly_once) == (
        handlers.record, 25, 1.5, None)
