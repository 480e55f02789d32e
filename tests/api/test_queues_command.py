"""``manage.py djqueue_queues``: queues' depths, and peek, pause, resume, redrive and
purge from a shell."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

import djqueue
from djqueue.models import Message, Queue, State
from tests.conftest import write_unreadable_time

pytestmark = pytest.mark.django_db(transaction=True)


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("djqueue_queues", *args, stdout=out)
    return out.getvalue().strip()


def _fill() -> None:
    """emails: 2 ready, 1 scheduled, 1 in flight, 1 dead; reports: empty and paused."""
    djqueue.create_queue("emails", max_attempts=1)
    djqueue.create_queue("reports", paused=True)
    djqueue.send_batch("emails", [{"n": i} for i in range(4)])
    djqueue.send("emails", {"n": "later"}, delay=600)
    djqueue.receive("emails")  # in flight
    [failing] = djqueue.receive("emails")
    failing.nack(error="bounced")  # max_attempts 1: dead in place


def test_the_listing_shows_each_queues_depth_sampled_now_or_by_the_reaper():
    _fill()
    before = command()  # no sample yet: the reaper has not run
    assert before.splitlines()[0].split()[:4] == ["QUEUE", "DATABASE", "PAUSED", "READY"]
    assert "never" in before and "emails" in before
    rows = {r["name"]: r for r in json.loads(command("list", "--now", "--json"))}
    assert {k: rows["emails"][k] for k in ("ready", "scheduled", "in_flight", "waiting",
                                           "dead")} == {
        "ready": 2, "scheduled": 1, "in_flight": 1, "waiting": 0, "dead": 1}
    assert rows["emails"]["oldest_ready_age"] >= 0 and rows["emails"]["sample_age"] >= 0
    assert (rows["reports"]["paused"], rows["reports"]["ready"]) == (True, 0)
    table = command("list")  # the sample just taken
    [emails] = [line.split() for line in table.splitlines() if line.startswith("emails")]
    assert emails[:8] == ["emails", "default", "no", "2", "1", "1", "0", "1"]


def test_pause_and_resume_name_several_queues():
    _fill()
    assert command("pause", "emails", "reports") == "emails: paused\nreports: paused"
    assert set(Queue.objects.values_list("paused", flat=True)) == {True}
    assert command("resume", "emails") == "emails: resumed"
    assert Queue.objects.get(name="emails").paused is False


def test_a_purge_says_what_it_would_delete_until_told_yes():
    _fill()
    with pytest.raises(CommandError, match=r"deletes its 4 ready, scheduled, waiting and dead "
                                           r"message\(s\) for good; add --yes"):
        command("purge", "emails")
    assert Message.objects.count() == 5
    assert command("purge", "emails", "--yes") == "emails: 4 message(s) purged"
    assert list(Message.objects.values_list("state", flat=True)) == [State.CLAIMED]


def test_peek_shows_messages_oldest_first_without_claiming_them():
    _fill()
    table = command("peek", "emails").splitlines()
    assert table[0].split() == ["ID", "STATE", "ATTEMPTS", "SENT", "GROUP", "PAYLOAD", "LAST",
                                "ERROR"]
    assert [line.split()[1] for line in table[1:]] == [
        "claimed", "dead", "ready", "ready", "scheduled"]
    [dead_line] = [line for line in table if " dead " in line]
    assert '{"n":1}' in dead_line and dead_line.rstrip().endswith("bounced")
    dead = json.loads(command("peek", "emails", "--state", "dead", "--json"))
    assert [(m["state"], m["payload"], m["attempts"]) for m in dead] == [("dead", {"n": 1}, 1)]
    assert dead[0]["errors"][-1]["error"] == "bounced"
    assert len(command("peek", "emails", "--limit", "2").splitlines()) == 3
    assert Message.objects.filter(state=State.CLAIMED).count() == 1  # nothing claimed
    long = djqueue.send("emails", {"text": "x" * 500})
    [line] = [line for line in command("peek", "emails", "--state", "ready", "--limit", "5")
              .splitlines() if line.startswith(str(long.pk))]
    assert "…" in line and len(line) < 200
    # A body written past the checks (not JSON) is shown as text, not a traceback.
    Message.objects.filter(pk=long.pk).update(body="{not json")
    [bad] = [m for m in json.loads(command("peek", "emails", "--json")) if m["id"] == long.pk]
    assert bad["payload"] == {"unreadable_body": "{not json"}


def test_peek_shows_a_failures_exception_not_its_tracebacks_first_line():
    djqueue.create_queue("jobs", max_attempts=1)
    djqueue.send_batch("jobs", [{"n": 1}, {"n": 2}])
    for message in djqueue.receive("jobs", max_messages=2):
        message.nack(error='Traceback (most recent call last):\n  File "shop/tasks.py", line '
                           '12, in charge\n    raise KeyError(sku)\nKeyError: \'sku-42\'\n')
    second = Message.objects.order_by("pk")[1]
    Message.objects.filter(pk=second.pk).update(errors={"written": "by hand"})
    table = command("peek", "jobs").splitlines()
    assert table[1].rstrip().endswith("KeyError: 'sku-42'"), table
    assert table[2].rstrip().endswith(" -"), table  # errors that are no list of records


def test_a_redrive_moves_dead_letters_back():
    dead = djqueue.create_queue("jobs.dead")
    djqueue.create_queue("jobs", max_attempts=1, dead_letter_queue=dead)
    sent = djqueue.send_batch("jobs", [{"n": i} for i in range(3)])
    for message in djqueue.receive("jobs", max_messages=3):
        message.nack(error="down")
    assert command("redrive", "jobs.dead", "--limit", "2") == "jobs.dead: 2 message(s) redriven"
    states = dict(Message.objects.filter(pk__in=[m.pk for m in sent]).values_list("pk", "state"))
    assert sorted(states.values()) == [State.READY, State.READY, State.DEAD]


@pytest.mark.parametrize("args, error", [
    (("pause", "nope"), "nope"),
    (("purge", "nope", "--yes"), "nope"),
    (("redrive", "jobs", "--limit", "0"), "must be 1 to"),
    (("redrive", "jobs", "--limit", "many"), "not a whole number"),
    (("redrive", "jobs", "--limit", "9" * 5000), r"not a whole number: '9{96}\.\.\.$"),
    (("list", "--everything"), "unrecognized arguments"),
    (("peek", "nope"), "nope"),
    (("peek", "jobs", "--state", "lost"), "invalid choice"),
    (("peek", "jobs", "--limit", "10001"), "must be 1 to"),
])
def test_bad_arguments_are_refused_with_a_reason(args, error):
    djqueue.create_queue("jobs")
    with pytest.raises(CommandError, match=error):
        command(*args)


def test_from_a_shell_an_unknown_queue_exits_with_status_1(spawn):
    djqueue.create_queue("emails")
    process = spawn("djqueue_queues", "pause", "emails", "nope")
    assert process.wait(60) == 1
    output = process.output()
    assert "emails: paused" in output and "nope" in output
    assert Queue.objects.get(name="emails").paused


def test_peek_shows_a_dead_letter_whose_times_cannot_be_read_with_the_others():
    """A dead letter whose times a hand edit left unreadable (no claim reads a dead
    letter, so nothing sets it aside) failed every peek of its queue with the driver's
    error: the very listing an operator reads to find it. It is listed now with its
    times unknown, by the API, the table and ``--json``."""
    dead = djqueue.create_queue("jobs.dead")
    djqueue.create_queue("jobs", max_attempts=1, dead_letter_queue=dead)
    sent = djqueue.send_batch("jobs", [{"n": i} for i in range(3)])
    for message in djqueue.receive("jobs", max_messages=3):
        message.nack(error="down")
    for column in ("sent_at", "visible_at"):
        write_unreadable_time("djqueue_message", column, sent[1].pk)
    peeked = djqueue.peek("jobs.dead", limit=3)
    assert [(m.pk, m.sent_at is None, m.payload) for m in peeked] == [
        (sent[0].pk, False, {"n": 0}), (sent[1].pk, True, {"n": 1}),
        (sent[2].pk, False, {"n": 2})]
    assert djqueue.get_message(sent[1].pk).sent_at is None
    assert [m.pk for m in djqueue.peek("jobs.dead", limit=2)] == [sent[0].pk, sent[1].pk]
    [line] = [line for line in command("peek", "jobs.dead").splitlines()
              if line.startswith(str(sent[1].pk))]
    assert line.split()[:4] == [str(sent[1].pk), "dead", "1", "unreadable"]
    listed = json.loads(command("peek", "jobs.dead", "--json"))
    assert [(m["sent_at"] is None, m["visible_at"] is None) for m in listed] == [
        (False, False), (True, True), (False, False)]
