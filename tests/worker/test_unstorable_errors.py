"""A failure whose text holds a character no database stores (a NUL, which PostgreSQL
reads in no text or JSON; a lone surrogate, which no driver encodes) is recorded with
that character escaped. Before, on PostgreSQL, the write of the failure failed: the
message stayed claimed until its lease ran out, to fail the same way again."""

import pytest

import djqueue
from djqueue.models import History, Message, State, TaskRecord, TaskStatus
from djqueue.tasks.compat import InvalidTask
from tests import tasks
from tests.handlers import UNSTORABLE_ERROR

pytestmark = pytest.mark.django_db(transaction=True)
ESCAPED = UNSTORABLE_ERROR.replace("\x00", "\\x00").replace("\udcff", "\\udcff")


def test_a_handlers_error_is_recorded_with_such_characters_escaped(spawn):
    djqueue.create_queue("f.poison", max_attempts=1)
    bad = djqueue.send("f.poison", {"kind": "unstorable", "n": 1})
    good = djqueue.send("f.poison", {"n": 2})
    worker = spawn("djqueue_worker", "f.poison", "--burst")
    assert worker.wait(60) == 0, worker.output()
    dead = Message.objects.get(pk=bad.id)
    assert dead.state == State.DEAD and dead.attempts == 1
    assert dead.errors[-1]["error"].rstrip().endswith(f"RuntimeError: {ESCAPED}")
    assert History.objects.filter(pk=good.id).exists()


@pytest.mark.parametrize(("task", "recorded"), [
    # its error, escaped
    (tasks.explode_unstorably, ESCAPED),
    # its value: its record is a JSON column, so the run fails and says why
    (tasks.returns_unstorably, "return value contains a NUL character"),
])
def test_a_tasks_error_or_value_holding_such_characters_fails_its_run_alone(
        spawn, task, recorded):
    failing, added = task.enqueue(), tasks.add.enqueue(1, 2)
    worker = spawn("djqueue_worker", "default", "--burst")
    assert worker.wait(60) == 0, worker.output()
    record = TaskRecord.objects.get(pk=failing.id)
    assert record.status == TaskStatus.FAILED
    assert recorded in record.errors[-1]["traceback"]
    assert TaskRecord.objects.get(pk=added.id).status == TaskStatus.SUCCESSFUL


def test_an_error_given_by_hand_is_recorded_so_too():
    djqueue.create_queue("by.hand", max_attempts=1)
    djqueue.send("by.hand", 1)
    [message] = djqueue.receive("by.hand")
    message.nack(error=UNSTORABLE_ERROR)
    assert Message.objects.get(pk=message.id).errors[-1]["error"] == ESCAPED


@pytest.mark.parametrize("args", [("a\x00b",), ("a\udcffb",), ({"k\x00": 1},)])
def test_task_arguments_that_no_database_stores_are_refused_at_enqueue(args):
    with pytest.raises(InvalidTask, match=r"NUL character|not valid Unicode"):
        tasks.echo.enqueue(*args)
    assert not Message.objects.exists() and not TaskRecord.objects.exists()


def test_a_task_message_sent_by_hand_with_a_nul_in_its_arguments_stalls_nothing(spawn):
    """``send()`` stores a NUL in a payload (a text column); a task's record is JSON.
    Such a message, sent past the backend's enqueue, is dead-lettered, and the others
    run."""
    djqueue.create_queue("default", exist_ok=True)
    forged = djqueue.send("default", {"task": "tests.tasks.echo", "backend": "default",
                                      "args": ["a\x00b"], "kwargs": {}})
    added = tasks.add.enqueue(1, 2)
    worker = spawn("djqueue_worker", "default", "--burst")
    assert worker.wait(60) == 0, worker.output()
    assert TaskRecord.objects.get(pk=added.id).status == TaskStatus.SUCCESSFUL
    dead = Message.objects.get(pk=forged.id)
    assert dead.state == State.DEAD and "NUL" in dead.errors[-1]["error"]


class Unwritable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


@pytest.mark.parametrize("error", [10**5000, Unwritable()], ids=["huge int", "str raises"])
def test_a_nack_whose_error_has_no_text_records_what_it_was(error):
    """Before, ``str(error)`` raised (Python writes no int of more than 4,300 digits)
    and the nack failed, the message still claimed until its lease ran out."""
    djqueue.create_queue("unstorable.nack")
    djqueue.send("unstorable.nack", {"n": 1})
    [message] = djqueue.receive("unstorable.nack")
    message.nack(error=error)
    row = Message.objects.get(pk=message.pk)
    assert row.state == State.SCHEDULED
    said = row.errors[-1]["error"]
    assert said == "an integer of 16610 bits" or "Unwritable object at 0x" in said, said
