"""Task messages are not trusted: a worker runs only a task of a djqueue backend serving
the message's queue, against the record made for that message; anything else is
dead-lettered at once with UntrustedTask, and nothing it names is imported."""

from __future__ import annotations

import pytest

import djqueue
from djqueue.models import Message, State, TaskRecord, TaskStatus
from tests import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def drain(spawn, tmp_path, queue: str = "default") -> str:
    marker = tmp_path / "imported"
    worker = spawn("djqueue_worker", queue, "--burst",
                   env={"DJQUEUE_TEST_IMPORT_MARKER": str(marker)})
    assert worker.wait(60) == 0, worker.output()
    assert not marker.exists(), "a forged task message made the worker import its module"
    return worker.output()


def dead_error(message_id: int) -> str:
    row = Message.objects.get(pk=message_id)
    assert row.state == State.DEAD, row.state
    assert row.attempts == 1  # dead-lettered at once, no retries
    return row.errors[-1]["error"]


def forged(payload: dict, queue: str = "default") -> int:
    djqueue.create_queue(queue, exist_ok=True)
    return djqueue.send(queue, payload).pk


def test_a_forged_task_path_is_never_imported_or_run(spawn, tmp_path):
    ids = [forged({"task": "tests.untrusted_import.not_a_task", "backend": "default",
                   "args": [], "kwargs": {}}),
           forged({"task": "os.system", "backend": "default", "args": ["true"], "kwargs": {}}),
           forged({"task": ["not", "a", "path"], "backend": "default", "args": [],
                   "kwargs": {}}),
           forged({"task": "tests.tasks.add", "backend": "default", "args": "12",
                   "kwargs": {}}),
           forged({"hello": "not a task message"})]
    good = tasks.add.enqueue(2, 3)
    drain(spawn, tmp_path)
    for message_id in ids:
        assert "UntrustedTask" in dead_error(message_id)
    good.refresh()
    assert good.status == TaskStatus.SUCCESSFUL and good.return_value == 5


def test_a_task_of_a_backend_that_does_not_serve_the_queue_is_refused(spawn, tmp_path):
    # "t.retrying" belongs to the "retrying" backend; "default" does not serve it.
    wrong_backend = forged({"task": "tests.tasks.add", "backend": "default", "args": [1, 2],
                            "kwargs": {}}, queue="t.retrying")
    no_backend = forged({"task": "tests.tasks.add", "backend": "nope", "args": [1, 2],
                         "kwargs": {}}, queue="t.retrying")
    drain(spawn, tmp_path, "t.retrying")
    assert "not a djqueue backend serving queue 't.retrying'" in dead_error(wrong_backend)
    assert "UntrustedTask" in dead_error(no_backend)


def test_a_message_naming_another_tasks_record_runs_nothing(spawn, tmp_path):
    victim = tasks.add.enqueue(20, 22)
    drain(spawn, tmp_path)
    victim.refresh()
    assert victim.return_value == 42
    before = TaskRecord.objects.get(pk=victim.id)
    ids = [forged({"task_result_id": victim.id}),
           forged({"task": "tests.tasks.add", "backend": "default", "args": [1, 1],
                   "kwargs": {}, "result_id": victim.id}),
           # An older message's record id beside a task: its record is looked up and
           # checked, as for any message naming a record id.
           forged({"task_result_id": victim.id, "task": "tests.tasks.add",
                   "backend": "default", "args": [1, 1], "kwargs": {}})]
    drain(spawn, tmp_path)
    for message_id in ids:
        assert "which is not its own" in dead_error(message_id)
    after = TaskRecord.objects.get(pk=victim.id)
    assert (after.status, after.return_value, after.worker_ids) == (
        before.status, before.return_value, before.worker_ids)
