"""Each fast path in djqueue.storage.fastpath gives what its plain path (public Django
APIs only) gives, on every database; and djqueue works end to end on the plain paths,
as it does on a Django version the fast paths were not verified with."""

from __future__ import annotations

import json

import pytest
from django.db import connection, transaction
from django.db.models.signals import post_init
from django.utils import timezone

import djqueue
from djqueue.models import Message, Queue, State, TaskRecord, Worker
from djqueue.storage import dialects, fastpath
from djqueue.storage.statements import lookup_statements, message_inserts

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=[True, False], ids=["fast", "plain"])
def paths(request, monkeypatch):
    """Run the test once with the fast paths and once with the plain ones (the switch
    djqueue itself turns off on an unverified Django version)."""
    monkeypatch.setattr(fastpath.verified, "enabled", request.param)
    return request.param


def columns(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_the_verified_versions_include_the_running_django():
    import django

    assert fastpath.verified.enabled == (django.VERSION[:2] in fastpath.verified.VERIFIED_DJANGO)


def test_built_instances_equal_model_init(paths):
    now = timezone.now()  # the time fields' default is a call: give both the same value
    shared = {"queue_id": 7, "priority": 2, "headers": {"a": 1}, "sent_at": now,
              "visible_at": now}
    built = fastpath.builder(Message, **shared)(body='{"x":1}', group_key="g")
    plain = Message(**shared, body='{"x":1}', group_key="g")
    assert columns(built) == columns(plain)
    assert built._state.adding and built._state.db is None
    times = {"enqueued_at": now}
    record = message_inserts.build(TaskRecord, id="r1", task_path="t.p", backend="default",
                                   **times)
    assert columns(record) == columns(TaskRecord(id="r1", task_path="t.p", backend="default",
                                                 **times))


def test_rows_become_instances_as_from_db_makes_them(paths):
    queue = djqueue.create_queue("fp.rows")
    djqueue.send(queue, {"n": 1}, headers={"h": [1]}, group_key="k")
    attnames = [f.attname for f in Message._meta.concrete_fields]
    values = [list(Message.objects.filter(queue=queue).values_list(*attnames).get())]
    [fast] = fastpath.from_rows(Message, "default", attnames, values)
    plain = Message.from_db("default", attnames, values[0])
    assert columns(fast) == columns(plain)
    assert not fast._state.adding and fast._state.db == "default"


def test_from_rows_calls_init_receivers_as_from_db_does(paths):
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=Message)
    try:
        attnames = ["id", "queue_id", "body"]
        fastpath.from_rows(Message, "default", attnames, [[1, 2, "{}"]])
    finally:
        post_init.disconnect(receiver, sender=Message)
    assert len(seen) == 1


def test_saved_and_unsaved_marks(paths):
    message = Message(queue_id=1, body="{}")
    fastpath.mark_saved(message, 41, "default")
    assert (message.pk, message._state.adding, fastpath.database_of(message)) == (41, False,
                                                                                   "default")
    fastpath.mark_unsaved(message)
    assert message.pk is None and message._state.adding


def test_related_cacher_leaves_what_reading_the_key_leaves(paths, django_assert_num_queries):
    queue = djqueue.create_queue("fp.related")
    message = Message(queue_id=queue.pk, body="{}")
    fastpath.related_cacher(Message, "queue")(message, queue)
    with django_assert_num_queries(0):  # a cached object: nothing is read
        assert message.queue is queue and message.queue_id == queue.pk


def test_json_encoder_writes_what_json_dumps_writes(paths):
    plain = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    encode = fastpath.json_encoder(plain)
    for value in [{"a": [1, 2.5, None, True]}, "text ✓", [], {"ω": {"n": -1}}, 10**20]:
        assert encode(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    with pytest.raises(TypeError):
        encode({"a": object()})
    with pytest.raises(ValueError):
        encode([float("nan")])


def test_a_written_out_insert_stores_what_a_cursor_stores(paths):
    queue = djqueue.create_queue("fp.insert")
    sent = djqueue.send(queue, {"via": "send"})
    row = Message.objects.get(pk=sent.pk)
    assert row.payload == {"via": "send"} and row.state == State.READY


def test_a_queues_row_reads_as_the_orm_reads_it(paths):
    dead = djqueue.create_queue("fp.lookup.dead")
    djqueue.create_queue("fp.lookup", backoff=[1, 2.5], dead_letter_queue=dead, paused=True,
                         max_payload_bytes=4096, trace=True, rate_limit="5/s")
    orm = Queue.objects.get(name="fp.lookup")
    read = lookup_statements.queue_named("default", "fp.lookup")
    assert type(read) is Queue and columns(read) == columns(orm)
    assert (read._state.adding, read._state.db) == (False, "default")
    assert read.created_at == orm.created_at and read.created_at.tzinfo is not None
    assert read.backoff == [1, 2.5] and read.paused is True
    assert columns(lookup_statements.queue_with_id("default", orm.pk)) == columns(orm)
    assert lookup_statements.queue_named("default", "fp.nowhere") is None
    assert lookup_statements.queue_with_id("default", orm.pk + 1000) is None


def test_the_wake_addresses_read_as_the_orm_reads_them(paths):
    Worker.objects.create(id="w1", hostname="h", pid=1, lock_key="k1",
                          queues=["a", "ω"], wake_address="127.0.0.1:4001")
    Worker.objects.create(id="w2", hostname="h", pid=2, lock_key="k2", queues=["b"])
    orm = list(Worker.objects.exclude(wake_address="").values_list("wake_address", "queues"))
    assert lookup_statements.wake_addresses("default") == orm == [("127.0.0.1:4001", ["a", "ω"])]


def test_the_reads_a_send_repeats_are_seen_by_query_observers(paths):
    """Where something observes queries (an execute_wrapper, as tracing and debugging
    tools install), the reads go through Django's cursor, so that it sees them."""
    djqueue.create_queue("fp.observed")
    seen = []

    def observe(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(observe):
        assert lookup_statements.queue_named("default", "fp.observed").name == "fp.observed"
        lookup_statements.wake_addresses("default")
    assert len(seen) == 2


def test_the_index_hint_changes_the_plan_not_the_rows(paths):
    queue = djqueue.create_queue("fp.hint")
    djqueue.send_batch(queue, [{"n": n} for n in range(5)], priority=1)
    djqueue.send(queue, {"n": "top"}, priority=9)
    query = Message.objects.filter(queue=queue, state=State.READY).claim_order()[:3]
    table = connection.ops.quote_name(Message._meta.db_table)
    hinted = list(fastpath.with_index_hint(query, table, dialects.claim_index_hint(connection)))
    assert [m.pk for m in hinted] == [m.pk for m in query]
    assert fastpath.ids_with_index_hint(
        query, table, dialects.claim_index_hint(connection)) == [m.pk for m in query]


def test_the_mysql_transaction_commits_and_rolls_back_like_atomic(paths):
    if connection.vendor != "mysql":
        pytest.skip("the BEGIN shortcut is MySQL/MariaDB's")
    queue = djqueue.create_queue("fp.txn")
    committed = []
    with fastpath.mysql_transaction(connection, "default"):
        djqueue.send(queue, {"n": 1})
        transaction.on_commit(lambda: committed.append(1))
        assert connection.in_atomic_block
    assert committed == [1]
    with pytest.raises(RuntimeError), fastpath.mysql_transaction(connection, "default"):
        djqueue.send(queue, {"n": 2})
        raise RuntimeError
    assert Message.objects.filter(queue=queue).count() == 1
    assert connection.get_autocommit()


def test_the_queue_works_end_to_end_on_either_path(paths):
    """Send, receive, ack, nack and the worker's claim+ack path, on the path chosen."""
    queue = djqueue.create_queue("fp.e2e", max_attempts=2)
    djqueue.send_batch(queue, [{"n": n} for n in range(20)])
    djqueue.send(queue, {"n": 20})
    got = djqueue.receive(queue, max_messages=21)
    assert sorted(m.payload["n"] for m in got) == list(range(21))
    got[0].nack(error="boom", delay=0)
    assert len(djqueue.ack_many(got[1:])) == 20
    [again] = djqueue.receive(queue)
    assert again.attempts == 2 and again.errors[0]["error"] == "boom"
    again.ack()
    assert not Message.objects.filter(queue=queue).exists()


def test_a_tasks_function_is_called_as_task_call_calls_it(paths):
    from tests.tasks import add, async_square

    sync = fastpath.sync_function(add.func)
    assert sync is (add.func if paths else None)
    assert (sync or add.call)(2, 3) == add.call(2, 3) == 5
    assert fastpath.sync_function(async_square.func) is None  # Task.call runs it in a loop
    assert async_square.call(4) == 16


def test_a_handler_threads_async_calls_run_on_its_kept_loop_and_their_sql_in_it(paths):
    """async_to_sync in a thread that keeps a loop: every call's coroutine on that one
    loop, its thread-sensitive calls back in the calling thread, as without the loop."""
    import asyncio
    import threading

    from asgiref.sync import async_to_sync, sync_to_async

    from djqueue.worker.handler_calls import run_coroutine

    seen: dict[str, object] = {}

    async def where(_: object) -> None:
        seen.setdefault("loops", []).append(asyncio.get_running_loop())  # kept alive
        seen.setdefault("sql_threads", set()).add(
            await sync_to_async(threading.get_ident, thread_sensitive=True)())
        seen.setdefault("ids", []).append(await Queue.objects.filter(name="fp.loop")
                                          .values_list("pk", flat=True).afirst())

    async def leaves_a_task(_: object) -> None:
        async def forever() -> None:
            try:
                await asyncio.sleep(3600)
            finally:
                seen["cancelled"] = True
        seen["task"] = asyncio.ensure_future(forever())
        await asyncio.sleep(0)

    queue = djqueue.create_queue("fp.loop")

    def handler_thread() -> None:
        fastpath.allow_kept_loop()
        try:
            for _ in range(3):
                run_coroutine(where, None)
            run_coroutine(leaves_a_task, None)
            seen["kept"] = getattr(fastpath.event_loops._here, "loop", None)
            seen["me"] = threading.get_ident()
            seen["plain"] = async_to_sync(sync_to_async(threading.get_ident))()
        finally:
            fastpath.drop_event_loop()
            connection.close()

    thread = threading.Thread(target=handler_thread)
    thread.start()
    thread.join(60)
    assert seen["ids"] == [queue.pk] * 3
    assert seen["sql_threads"] == {seen["me"]}
    assert seen["cancelled"] is True and seen["task"].cancelled()
    if paths and fastpath.event_loops.enabled:
        assert len({id(loop) for loop in seen["loops"]}) == 1
        assert seen["kept"].is_closed()
    else:
        assert seen["kept"] is None and len({id(loop) for loop in seen["loops"]}) == 3
