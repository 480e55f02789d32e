"""A draining receiver continues its claims after the last message it took (MySQL/MariaDB),
never loses a message to that shortcut, and keeps strict order for what its own process
readies (djqueue.storage.claim_resume)."""

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import djqueue
from djqueue.models import Message, State
from djqueue.storage import dialects
from djqueue.storage.claim_resume import resume_points
from tests.conftest import needs_row_locks

pytestmark = [pytest.mark.django_db(transaction=True), needs_row_locks]


@pytest.fixture(autouse=True)
def _no_cursors():
    resume_points.forget()
    yield
    resume_points.forget()


def ids(messages) -> list[int]:
    return [m.pk for m in messages]


def ready_again_elsewhere(message_id: int) -> None:
    """What another process's release does to the row (this process is not told)."""
    Message.objects.filter(pk=message_id).update(state=State.READY, owner="", lease_token="")


def continues() -> bool:
    return dialects.continues_claims(connection)


def test_a_full_claim_continues_after_its_last_message_and_a_short_one_reads_from_the_head():
    queue = djqueue.create_queue("cc.drain")
    sent = ids(djqueue.send_batch(queue, [{"n": n} for n in range(6)]))
    assert ids(djqueue.receive(queue, max_messages=2)) == sent[:2]
    ready_again_elsewhere(sent[0])
    with CaptureQueriesContext(connection) as claim:
        second = ids(djqueue.receive(queue, max_messages=2))
    if continues():
        # The first message sits before the cursor: it waits for the next read from the head.
        assert second == sent[2:4]
        assert f"> {sent[1]}" in next(q["sql"] for q in claim if "SKIP LOCKED" in q["sql"])
        assert ids(djqueue.receive(queue, max_messages=2)) == sent[4:6]
        # Nothing after the cursor any more: the same claim falls back to the head.
        assert ids(djqueue.receive(queue, max_messages=2)) == [sent[0]]
        assert djqueue.receive(queue, max_messages=2) == []
    else:
        assert second == [sent[0], sent[2]]


def test_without_claim_rescan_every_claim_reads_from_the_head():
    queue = djqueue.create_queue("cc.off")
    sent = ids(djqueue.send_batch(queue, [{"n": n} for n in range(4)]))
    with override_settings(DJQUEUE={"CLAIM_RESCAN": 0}):
        assert ids(djqueue.receive(queue, max_messages=2)) == sent[:2]
        ready_again_elsewhere(sent[0])
        assert ids(djqueue.receive(queue, max_messages=2)) == [sent[0], sent[2]]


def test_an_expired_cursor_reads_from_the_head(monkeypatch):
    queue = djqueue.create_queue("cc.expiry")
    sent = ids(djqueue.send_batch(queue, [{"n": n} for n in range(4)]))
    assert ids(djqueue.receive(queue, max_messages=2)) == sent[:2]
    ready_again_elsewhere(sent[0])
    cursor = resume_points.get("default", queue.pk)
    assert (cursor is not None) == continues()
    if cursor is not None:
        import djqueue.storage.claim_resume as module

        monkeypatch.setattr(module.time, "monotonic", lambda: cursor.rescan_at)
    assert ids(djqueue.receive(queue, max_messages=2)) == [sent[0], sent[2]]


@pytest.mark.parametrize("ready_again", ["release", "nack", "retry_now", "redrive", "priority"])
def test_what_this_process_readies_is_claimed_in_strict_order(ready_again):
    from djqueue.api.queue_operations import retry_now

    dlq = djqueue.create_queue(f"cc.local.{ready_again}.dlq")
    queue = djqueue.create_queue(f"cc.local.{ready_again}", dead_letter_queue=dlq,
                                 max_attempts=1 if ready_again == "redrive" else 16)
    sent = ids(djqueue.send_batch(queue, [{"n": n} for n in range(6)]))
    first, second = djqueue.receive(queue, max_messages=2)
    second.ack()
    expected = first.pk
    if ready_again == "release":
        first.nack()
    elif ready_again == "nack":
        first.nack(error="try again", delay=0)
    elif ready_again == "retry_now":
        first.nack(error="later", delay=3600)
        assert retry_now([first.pk]) == 1
    elif ready_again == "redrive":
        first.nack(error="dead")
        assert Message.objects.get(pk=first.pk).state == State.DEAD
        assert djqueue.redrive(dlq, to=queue) == 1
    else:
        expected = djqueue.send(queue, {"urgent": True}, priority=5).pk
        first.ack()
    assert ids(djqueue.receive(queue, max_messages=2)) == [expected, sent[2]]


def test_a_claim_rolled_back_leaves_no_cursor():
    from djqueue.storage.receiver_claims import PromotionClock, claim_ready

    queue = djqueue.create_queue("cc.rollback")
    sent = ids(djqueue.send_batch(queue, [{"n": n} for n in range(4)]))

    def refuse_the_stamp(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("UPDATE"):  # after the claim's SELECT
            raise RuntimeError("claim failed")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(refuse_the_stamp), pytest.raises(RuntimeError):
        claim_ready([queue], 2, owner="t", visibility_timeout=None, clock=PromotionClock())
    assert resume_points.get("default", queue.pk) is None
    assert ids(djqueue.receive(queue, max_messages=2)) == sent[:2]
