"""System checks report configuration mistakes with stable ids."""

from django.core.checks import run_checks
from django.test import override_settings


def ids(**kwargs) -> set[str]:
    return {m.id for m in run_checks(tags=["djqueue"], **kwargs)}


def test_default_configuration_is_clean():
    assert ids() == set()


def test_unknown_setting_is_e001():
    with override_settings(DJQUEUE={"HANDLER": {}}):
        assert ids() == {"djqueue.E001"}


def test_unknown_database_alias_is_e002():
    with override_settings(DJQUEUE={"DATABASE": "elsewhere"}):
        assert ids() == {"djqueue.E002"}


def test_handler_that_does_not_import_is_e003():
    with override_settings(DJQUEUE={"HANDLERS": {"jobs": "tests.handlers.nothing_here"}}):
        assert ids() == {"djqueue.E003"}
