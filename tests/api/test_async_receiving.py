"""Receiving from async code: areceive, aconsume, and a message's aack/anack/aextend/aprogress."""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation
from django.utils import timezone

import djqueue
from djqueue.exceptions import (
    InvalidCondition,
    InvalidMessage,
    InvalidProgress,
    NotOwner,
    Postpone,
    QueueNotFound,
)
from djqueue.models import History, Message, State
from tests.conftest import run_async

pytestmark = pytest.mark.django_db(transaction=True)


def test_areceive_claims_from_a_coroutine_where_a_sync_receive_is_refused(monkeypatch):
    monkeypatch.delenv("DJANGO_ALLOW_ASYNC_UNSAFE", raising=False)
    djqueue.create_queue("ar")
    djqueue.send_batch("ar", [{"n": n} for n in range(3)], priority=1)
    djqueue.send("ar", {"n": 9}, priority=5)

    async def main():
        with pytest.raises(SynchronousOnlyOperation):
            djqueue.receive("ar")
        got = await djqueue.areceive("ar", max_messages=2, where="priority >= 5")
        rest = await djqueue.areceive("ar", max_messages=10, owner="reporting-job")
        for message in got + rest:
            await message.aack()
        return got, rest

    got, rest = run_async(main())
    assert [m.payload for m in got] == [{"n": 9}]
    assert [m.payload for m in rest] == [{"n": n} for n in range(3)]
    assert {m.owner for m in rest} == {"reporting-job"}
    assert Message.objects.count() == 0 and History.objects.count() == 4


def test_two_tasks_of_one_loop_receive_as_two_owners():
    djqueue.create_queue("ar")
    djqueue.send_batch("ar", [{"n": 1}, {"n": 2}])

    async def main():
        return await asyncio.gather(djqueue.areceive("ar"), djqueue.areceive("ar"))

    [first], [second] = run_async(main())
    assert {first.pk, second.pk} == set(Message.objects.values_list("pk", flat=True))
    assert first.owner != second.owner
    assert all(":task-" in m.owner for m in (first, second))
    rows = dict(Message.objects.values_list("pk", "owner"))
    assert rows == {first.pk: first.owner, second.pk: second.owner}


def test_a_waiting_areceive_leaves_the_sync_thread_free_and_takes_a_later_send():
    """The long poll waits on the event loop: a send made through Django's sync thread
    meanwhile commits, and the waiting receive then claims it."""
    djqueue.create_queue("ar")

    async def main():
        waiting = asyncio.ensure_future(djqueue.areceive("ar", wait=60))
        done, _ = await asyncio.wait([waiting], timeout=0.3)
        assert not done, "the queue is empty: the receive waits"
        sent = await asyncio.wait_for(sync_to_async(djqueue.send)("ar", {"n": 1}), 10)
        return sent, await asyncio.wait_for(waiting, 10)

    sent, [got] = run_async(main())
    assert got.pk == sent.pk
    assert Message.objects.get(pk=sent.pk).state == State.CLAIMED


def test_an_areceive_with_nothing_returns_empty_at_its_wait():
    djqueue.create_queue("ar")

    async def main():
        start = time.monotonic()
        got = await djqueue.areceive("ar", wait=0.4)
        return got, time.monotonic() - start

    got, took = run_async(main())
    assert got == [] and took >= 0.4


def test_areceive_refuses_bad_input_with_the_sync_errors_and_claims_nothing():
    djqueue.create_queue("ar")
    djqueue.send("ar", {"n": 1})
    cases = [
        (djqueue.areceive("nowhere"), QueueNotFound),
        (djqueue.areceive([]), InvalidMessage),
        (djqueue.areceive("ar", max_messages=0), InvalidMessage),
        (djqueue.areceive("ar", wait=-1), InvalidMessage),
        (djqueue.areceive("ar", visibility_timeout=0), InvalidMessage),
        (djqueue.areceive("ar", owner=""), InvalidMessage),
        (djqueue.areceive("ar", where="payload.n ==="), InvalidCondition),
    ]
    for call, error in cases:
        start = time.monotonic()
        with pytest.raises(error):
            run_async(call)
        assert time.monotonic() - start < 1, call
    assert Message.objects.get().state == State.READY


def test_a_messages_async_settlements_change_its_row():
    djqueue.create_queue("ar", max_attempts=3)
    sent = djqueue.send("ar", {"n": 1})

    async def main():
        [message] = await djqueue.areceive("ar", visibility_timeout=30)
        before = message.visible_at
        await message.aextend(600)
        await message.aprogress(0.5, "half")
        with pytest.raises(InvalidProgress):
            await message.aprogress(2.0)
        await message.anack(delay=0, error="the partner answered 503")
        with pytest.raises(NotOwner):
            await message.aack()
        return before

    before = run_async(main())
    row = Message.objects.get(pk=sent.pk)
    assert row.state == State.READY and row.attempts == 1
    assert row.last_error == "the partner answered 503"
    assert row.visible_at < before + timezone.timedelta(seconds=600)
    assert (djqueue.get_progress(sent.pk).fraction, djqueue.get_progress(sent.pk).note) == (0.5, "half")


def test_aconsume_acks_on_a_clean_exit_and_records_an_exception():
    djqueue.create_queue("ar", max_attempts=5)
    first = djqueue.send("ar", {"n": 1})

    async def main():
        async with djqueue.aconsume("ar") as message:
            assert message.pk == first.pk
        second = await sync_to_async(djqueue.send)("ar", {"n": 2})
        with pytest.raises(ValueError, match="bad row"):
            async with djqueue.aconsume("ar") as message:
                raise ValueError("bad row")
        async with djqueue.aconsume("ar", wait=0.1) as nothing:
            assert nothing is None
        return second

    second = run_async(main())
    assert History.objects.filter(pk=first.pk).exists()
    row = Message.objects.get(pk=second.pk)
    assert row.attempts == 1 and "ValueError: bad row" in row.last_error
    assert row.state == State.SCHEDULED  # the queue's backoff before its next delivery


def test_aconsume_gives_a_postponed_or_cancelled_message_back_uncounted():
    djqueue.create_queue("ar")
    sent = djqueue.send("ar", {"n": 1})

    async def postponed():
        async with djqueue.aconsume("ar") as message:
            raise Postpone(0)
        return message

    async def cancelled():
        entered = asyncio.Event()

        async def consumer():
            async with djqueue.aconsume("ar") as message:
                assert message.pk == sent.pk
                entered.set()
                await asyncio.sleep(3600)

        task = asyncio.ensure_future(consumer())
        await asyncio.wait_for(entered.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    assert run_async(postponed()).pk == sent.pk
    row = Message.objects.get(pk=sent.pk)
    assert (row.state, row.attempts, row.errors) == (State.READY, 0, None)
    run_async(cancelled())
    row = Message.objects.get(pk=sent.pk)
    assert (row.state, row.attempts, row.errors, row.owner) == (State.READY, 0, None, "")


@pytest.mark.parametrize("kind", ["receive", "areceive"])
def test_a_waiting_receive_on_a_rate_limited_queue_claims_when_its_next_token_is_due(
        settings, kind):
    """Its pause ends when the limit lets a claim through, not at its next poll (here
    60 s away, and no send comes to wake it)."""
    settings.DJQUEUE = {**settings.DJQUEUE, "POLL_MIN": 60.0, "POLL_MAX": 60.0}
    djqueue.create_queue("ar.rate", rate_limit="2/s", rate_burst=1)
    djqueue.send_batch("ar.rate", [{"n": 1}, {"n": 2}])
    [first] = djqueue.receive("ar.rate")
    started = time.monotonic()
    if kind == "receive":
        second = djqueue.receive("ar.rate", wait=30)
    else:
        second = run_async(djqueue.areceive("ar.rate", wait=30))
    assert [m.payload["n"] for m in [first, *second]] == [1, 2]
    assert time.monotonic() - started < 10
