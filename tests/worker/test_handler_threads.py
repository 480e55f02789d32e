"""A worker's handler threads and the project's other databases."""

import pytest

import djqueue
from djqueue.models import History

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_database_djqueue_does_not_use_is_never_loaded_by_a_handler_thread(spawn):
    """A project may name a database djqueue does not use, whose backend a worker's host
    cannot load (DJQUEUE_TEST_UNLOADABLE_ALIAS adds one whose ENGINE is no module). A
    handler thread's first run looks up the connections of djqueue's own databases
    only, so no first run fails on it and every message is done at its first attempt.
    The worker skips Django's system checks, which from Django 6.1 load every alias's
    backend (on 5.2 they load none of them)."""
    djqueue.create_queue("t.record")
    djqueue.send_batch("t.record", [{"n": i} for i in range(20)])
    worker = spawn("djqueue_worker", "t.record", "-c", "4", "--burst", "--skip-checks",
                   env={"DJQUEUE_TEST_UNLOADABLE_ALIAS": "1"})
    assert worker.wait(60) == 0, worker.output()
    assert sorted(History.objects.values_list("attempts", flat=True)) == [1] * 20
    assert "no_such_backend" not in worker.output()
