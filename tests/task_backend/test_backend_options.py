"""A djqueue task backend's OPTIONS: a bad one stops the backend being made, with a
ConfigurationError naming the setting (it was ``int()``'s or ``import_string``'s own
error, or was kept and failed each enqueue, or was ignored); queue options that
create_queue would refuse are the backend's system check error djqueue.E007."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import djqueue
from djqueue.exceptions import ConfigurationError
from djqueue.tasks.backend import QueueBackend
from djqueue.tasks.compat import task_backends


def backend(options: Any, queues: tuple[str, ...] = ("q",)) -> QueueBackend:
    return QueueBackend("jobs", {"QUEUES": list(queues), "OPTIONS": options})


@pytest.mark.parametrize(("options", "named"), [
    ({"MAX_ATTEMPTS": "3"}, "MAX_ATTEMPTS"),
    ({"MAX_ATTEMPTS": 0}, "MAX_ATTEMPTS"),
    ({"MAX_ATTEMPTS": 2.5}, "MAX_ATTEMPTS"),
    ({"MAX_ATTEMPTS": True}, "MAX_ATTEMPTS"),
    ({"MAX_ATTEMPTS": 10**30}, "MAX_ATTEMPTS"),
    ({"RETRY_ON": "builtins.ValueError"}, "RETRY_ON"),
    ({"RETRY_ON": ["no_such_module.Error"]}, "RETRY_ON"),
    ({"RETRY_ON": ["os.path"]}, "RETRY_ON"),
    ({"RETRY_ON": [int]}, "RETRY_ON"),
    ({"QUEUE_OPTIONS": ["visibility_timeout"]}, "QUEUE_OPTIONS"),
    ({"QUEUE_OPTIONS": {5: 1}}, "QUEUE_OPTIONS"),
    ({"GROUP_KEY_KWARG": 5}, "GROUP_KEY_KWARG"),
    ({"GROUP_KEY_KWARG": ""}, "GROUP_KEY_KWARG"),
    ({"ENQUEUE_ON_COMMIT": True}, "ENQUEUE_ON_COMMIT"),
    ({"ENQUEUE_ON_COMMIT": "no_such_alias"}, "ENQUEUE_ON_COMMIT"),
    ({"TASK_MODULES": "tests.tasks"}, "TASK_MODULES"),
    ({"TASK_MODULES": [5]}, "TASK_MODULES"),
    ({"MAX_ATTEMPT": 3}, "MAX_ATTEMPT"),
    (["MAX_ATTEMPTS"], "OPTIONS"),
])
def test_a_bad_option_stops_the_backend_naming_it(options, named):
    with pytest.raises(ConfigurationError, match="TASKS\\['jobs'\\]\\['OPTIONS'\\]") as caught:
        backend(options)
    assert named in str(caught.value)


def test_good_options_are_read_as_given():
    made = backend({"MAX_ATTEMPTS": 3, "RETRY_ON": ["builtins.ValueError", KeyError],
                    "QUEUE_OPTIONS": {"visibility_timeout": 30, "q": {"rate_limit": "5/s"}},
                    "GROUP_KEY_KWARG": "tenant_id", "ENQUEUE_ON_COMMIT": "default",
                    "TASK_MODULES": ["tests.tasks"]})
    read = made.backend_options
    assert (read.max_attempts, read.retry_on) == (3, (ValueError, KeyError))
    assert read.queue_options == {"visibility_timeout": 30}
    assert read.per_queue_options == {"q": {"rate_limit": "5/s"}}
    assert (read.group_key_kwarg, read.enqueue_on_commit, read.task_modules) == (
        "tenant_id", "default", ("tests.tasks",))
    assert made.check() == []
    assert backend({"ENQUEUE_ON_COMMIT": False}).backend_options.enqueue_on_commit is None


def test_queue_options_create_queue_would_refuse_are_a_system_check_error():
    made = backend({"QUEUE_OPTIONS": {"max_attempts": "x", "own": {"rate_limit": "fast"}}},
                   queues=("q", "bad name!"))
    errors = {error.msg.split(":")[0]: error for error in made.check()}
    assert set(errors) == {"Task queue 'q'", "Task queue 'bad name!'", "Task queue 'own'"}
    assert {error.id for error in errors.values()} == {"djqueue.E007"}
    assert "max_attempts" in errors["Task queue 'q'"].msg
    assert "valid queue name" in errors["Task queue 'bad name!'"].msg
    assert "not a rate" in errors["Task queue 'own'"].msg
    unknown = backend({"QUEUE_OPTIONS": {"colour": "red"}}).check()
    assert [error.msg for error in unknown] == ["Task queue 'q': Unknown queue option(s): colour"]


def test_the_configured_backends_pass_the_system_check():
    configured = [b for b in task_backends.all() if isinstance(b, QueueBackend)]
    assert len(configured) >= 2
    assert [message for b in configured for message in b.check()] == []


def test_a_tasks_own_retry_on_and_max_attempts_take_the_place_of_the_backends():
    """What a worker asks after each failed run (its paths imported once, then cached)."""
    from tests.tasks import fails_twice

    retrying = task_backends["retrying"]  # MAX_ATTEMPTS 3, RETRY_ON ValueError
    assert retrying.should_retry(fails_twice, 2, ValueError())
    assert not retrying.should_retry(fails_twice, 3, ValueError())
    assert not retrying.should_retry(fails_twice, 1, KeyError())
    own = dataclasses.replace(fails_twice, max_attempts=5,
                              retry_on=["builtins.KeyError", LookupError])
    for _ in range(2):  # the second time from the cache
        assert retrying.should_retry(own, 4, KeyError())
        assert retrying.should_retry(own, 4, IndexError())  # a LookupError
        assert not retrying.should_retry(own, 4, ValueError())  # the backend's, replaced
        assert not retrying.should_retry(own, 5, KeyError())
    assert retrying.should_retry(own, 1, djqueue.RetryAfter(1))  # always a retry
