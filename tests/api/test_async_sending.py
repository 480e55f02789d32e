"""Sending from async code: asend, asend_batch, apublish, apublish_batch."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import SynchronousOnlyOperation

import djqueue
from djqueue.exceptions import InvalidMessage, QueueFull, QueueNotFound
from djqueue.models import History, Message, State
from tests.conftest import run_async

pytestmark = pytest.mark.django_db(transaction=True)


def test_asend_from_a_coroutine_is_committed_where_a_sync_send_is_refused(monkeypatch):
    monkeypatch.delenv("DJANGO_ALLOW_ASYNC_UNSAFE", raising=False)
    djqueue.create_queue("as")

    async def main():
        with pytest.raises(SynchronousOnlyOperation):
            djqueue.send("as", {"n": 0})
        return await djqueue.asend("as", {"n": 1}, priority=3, headers={"h": "v"},
                                   group_key="g", delay=0)

    sent = run_async(main())
    row = Message.objects.get()
    assert (row.pk, row.payload, row.priority, row.headers, row.group_key) == (
        sent.pk, {"n": 1}, 3, {"h": "v"}, "g")
    [received] = djqueue.receive("as")
    assert received.pk == sent.pk


def test_asend_batch_takes_a_generator_once_and_keeps_its_order():
    djqueue.create_queue("as")
    sent = run_async(djqueue.asend_batch("as", ({"n": i} for i in range(5)), priority=2))
    rows = list(Message.objects.order_by("pk"))
    assert [m.payload for m in rows] == [{"n": i} for i in range(5)]
    assert [m.pk for m in sent] == [m.pk for m in rows]
    assert {m.priority for m in rows} == {2}


def test_a_dedup_key_makes_one_message_from_two_asends():
    djqueue.create_queue("as")

    async def main():
        first = await djqueue.asend("as", {"n": 1}, dedup_key="k")
        return first, await djqueue.asend("as", {"n": 2}, dedup_key="k")

    first, second = run_async(main())
    assert second.pk == first.pk and second.duplicate
    assert Message.objects.count() == 1


def test_apublish_delivers_to_every_group_of_the_topic():
    djqueue.create_topic("orders")
    djqueue.subscribe("orders", "billing")
    djqueue.subscribe("orders", "shipping")

    async def main():
        await djqueue.apublish("orders", {"order": 1})
        await djqueue.apublish_batch("orders", iter([{"order": 2}, {"order": 3}]))

    run_async(main())
    for group in ("billing", "shipping"):
        [queue] = djqueue.group_queues("orders", group)
        got = djqueue.receive(queue, max_messages=10)
        assert sorted(m.payload["order"] for m in got) == [1, 2, 3]


def test_async_sends_refuse_bad_input_with_the_sync_errors():
    djqueue.create_queue("as")
    cases = [
        (djqueue.asend("nowhere", {}), QueueNotFound),
        (djqueue.asend("as", {}, priority="high"), InvalidMessage),
        (djqueue.asend("as", {}, block=True, timeout=-1), InvalidMessage),
        (djqueue.asend("as", object()), InvalidMessage),
        (djqueue.asend_batch("as", [{}], group_key="a", group_keys=["b"]), InvalidMessage),
        (djqueue.apublish("no-such-topic", {}), LookupError),
    ]
    for call, error in cases:
        with pytest.raises(error):
            run_async(call)
    assert Message.objects.count() == 0


def test_a_blocked_asend_waits_on_the_event_loop_and_goes_in_once_there_is_room():
    """The wait for room leaves Django's sync thread free: a consumer's ack runs in
    that thread meanwhile, and the send then goes in."""
    djqueue.create_queue("af", max_depth=1)
    first = djqueue.send("af", {"n": 1})

    async def main():
        waiting = asyncio.ensure_future(
            djqueue.asend("af", {"n": 2}, block=True, timeout=60))
        done, _ = await asyncio.wait([waiting], timeout=0.5)
        assert not done, "the queue is full: the send waits"
        [claimed] = await asyncio.wait_for(sync_to_async(djqueue.receive)("af"), 10)
        await asyncio.wait_for(sync_to_async(claimed.ack)(), 10)
        return claimed, await asyncio.wait_for(waiting, 10)

    claimed, sent = run_async(main())
    assert claimed.pk == first.pk
    assert History.objects.filter(pk=first.pk).exists()
    row = Message.objects.get()
    assert (row.pk, row.payload, row.state) == (sent.pk, {"n": 2}, State.READY)


def test_a_blocked_asend_raises_queue_full_at_its_timeout_without_holding_the_sync_thread():
    djqueue.create_queue("af", max_depth=1)
    djqueue.send("af", {"n": 1})
    finished: list[str] = []

    async def refused():
        with pytest.raises(QueueFull, match="holds 1 of at most 1"):
            await djqueue.asend("af", {"n": 2}, block=True, timeout=1.5)
        finished.append("refused")

    async def lookup():
        await sync_to_async(djqueue.get_queue)("af")
        finished.append("lookup")

    async def main():
        await asyncio.gather(refused(), lookup())

    run_async(main())
    assert finished == ["lookup", "refused"]
    assert Message.objects.count() == 1
