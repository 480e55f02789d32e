"""A worker process collects Python's cyclic garbage less often than Python's default,
with what it held at start frozen (djqueue.processes.garbage_collection), unless
WORKER_GC_THRESHOLD is None."""

import gc

import pytest

import djqueue
from tests.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(("setting", "young"), [(None, None), ("30000", 30_000)])
def test_a_worker_process_collects_as_its_setting_says(spawn, setting, young):
    """None: Python's own threshold (this test process's, untouched) and nothing frozen."""
    djqueue.create_queue("t.gc")
    djqueue.send("t.gc", {"n": 1})
    env = {"DJQUEUE_TEST_GC_THRESHOLD": setting or "none"}
    worker = spawn("djqueue_worker", "t.gc", "--burst", env=env)
    assert worker.wait(60) == 0, worker.output()
    [effect] = Effect.objects.all()
    assert effect.attempt == (young or gc.get_threshold()[0])
    if setting is None:
        assert effect.pid == 0, "nothing frozen"
    else:
        assert effect.pid > 10_000, "Django's and the project's objects frozen at start"
