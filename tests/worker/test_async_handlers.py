"""Async handlers (``async def``) in a worker and in drain(): their async ORM writes, their
reports, an exactly-once one's writes in its ack's transaction."""

import pytest

import djqueue
from djqueue.models import History, Message, State
from djqueue.worker import handler_logs
from tests.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("how", ["worker", "drain"])
def test_an_exactly_once_async_handlers_write_commits_with_its_ack_or_not_at_all(spawn, how):
    djqueue.create_queue("t.aexactly", max_attempts=1)
    djqueue.send_batch("t.aexactly", [{"n": n, "fail": n % 2 == 1} for n in range(6)])
    if how == "worker":
        assert spawn("djqueue_worker", "t.aexactly", "--burst").wait(60) == 0
    else:
        djqueue.drain("t.aexactly")
    assert sorted(Effect.objects.values_list("key", flat=True)) == [0, 2, 4]
    assert History.objects.filter(queue__name="t.aexactly").count() == 3
    dead = Message.objects.filter(queue__name="t.aexactly", state=State.DEAD)
    assert sorted(m.payload["n"] for m in dead) == [1, 3, 5]
    assert all("after its write" in m.last_error for m in dead)


def test_an_async_handler_in_a_worker_writes_logs_and_fails_as_a_sync_one(spawn):
    handler_logs.install()
    djqueue.create_queue("t.async", max_attempts=1)
    sent = djqueue.send_batch("t.async", [{"n": n, "log": n == 3, "fail": n == 4}
                                          for n in range(200)])
    assert spawn("djqueue_worker", "t.async", "-c", "4", "--burst").wait(60) == 0
    assert sorted(Effect.objects.values_list("key", flat=True)) == list(range(200))
    assert History.objects.filter(queue__name="t.async").count() == 199
    [dead] = Message.objects.filter(queue__name="t.async", state=State.DEAD)
    assert dead.payload["n"] == 4 and "refused 4 after its write" in dead.last_error
    assert [r.text for r in djqueue.get_logs(sent[3].pk)] == ["async run of 3"]
