"""The hot path's own statements (djqueue.storage.statements) give what the ORM would,
on every database:
messages loaded from claim rows, batch inserts with their shared values escaped once,
and a worker's ack and next claim in one transaction."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import djqueue
from djqueue.api.condition_parser import compile_condition
from djqueue.exceptions import InvalidCondition
from djqueue.models import History, Message, State
from djqueue.storage.claims import ack_and_claim
from djqueue.storage.receiver_claims import PromotionClock, claim_ready
from djqueue.storage.statements import claim_statements, message_inserts
from tests.conftest import needs_row_locks

pytestmark = pytest.mark.django_db(transaction=True)

#: Text that breaks naive quoting or %-interpolation, as values in every shared column.
TRICKY = ["it's", 'say "hi"', "back\\slash", "100% %s %(x)s %%", "Ωμέγα ✓ 𝄞", "x'); DROP TABLE t; --"]


def field_values(message: Message) -> dict:
    return {f.attname: getattr(message, f.attname) for f in Message._meta.concrete_fields}


def test_loaded_messages_equal_what_the_orm_loads():
    queue = djqueue.create_queue("hp.load", ordered=True)
    djqueue.send(queue, {"n": 1}, headers={"a": [1, 2], "b": None}, group_key="g1", priority=3)
    djqueue.send(queue, "text", delay=3600)
    [claimed] = djqueue.receive(queue)
    claimed.nack(error="boom", delay=0)  # errors, claimed_at, attempts now set
    columns = ", ".join(connection.ops.quote_name(f.column)
                        for f in Message._meta.concrete_fields)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM djqueue_message ORDER BY id")
        loaded = claim_statements.load_messages("default", cursor.fetchall())
    expected = list(Message.objects.order_by("id"))
    assert [field_values(m) for m in loaded] == [field_values(m) for m in expected]
    assert loaded[0].errors and loaded[0].errors[-1]["error"] == "boom"
    assert loaded[0].headers == {"a": [1, 2], "b": None}
    assert loaded[1].visible_at > timezone.now() + timedelta(minutes=59)
    assert all(not m._state.adding and m._state.db == "default" for m in loaded)


@needs_row_locks
def test_claimed_messages_carry_the_stored_datetimes_exactly():
    """The claim may read datetimes as text (dialects.reads_datetimes_as_text): whole seconds,
    microseconds and NULL come back as the ORM loads them."""
    queue = djqueue.create_queue("hp.times")
    sent = djqueue.send_batch(queue, [{"n": n} for n in range(3)])
    whole = timezone.now().replace(microsecond=0) - timedelta(days=400)
    Message.objects.filter(pk=sent[0].pk).update(sent_at=whole)
    Message.objects.filter(pk=sent[1].pk).update(sent_at=whole.replace(microsecond=1))
    expected = {m.pk: m for m in Message.objects.filter(queue=queue)}
    assert all(m.claimed_at is None for m in expected.values())
    claimed = claim_statements.lock_ready("default", queue.pk, 10)
    assert [m.pk for m in claimed] == [m.pk for m in sent]
    for message in claimed:
        assert field_values(message) == field_values(expected[message.pk])
        assert message.sent_at.tzinfo is not None
    assert claimed[0].sent_at == whole and claimed[1].sent_at.microsecond == 1


def test_id_lists_are_integers_only():
    from djqueue.storage.statements.prepared_values import id_list

    assert id_list([3, 10**15, True]) == "3, 1000000000000000, 1"
    with pytest.raises(ValueError):
        id_list([1, "2); DROP TABLE djqueue_message; --"])
    with pytest.raises(TypeError):
        id_list([None])


def test_batch_insert_keeps_shared_values_byte_for_byte():
    queue = djqueue.create_queue("hp.batch", ordered=True)
    headers = {text: text for text in TRICKY}
    payloads = [{"n": i, "text": TRICKY[i % len(TRICKY)]} for i in range(50)]
    keys = [TRICKY[i % len(TRICKY)] if i % 3 else None for i in range(50)]
    sent = djqueue.send_batch(queue, payloads, headers=headers, group_keys=keys, priority=-7)
    stored = {m.pk: m for m in Message.objects.filter(queue=queue)}
    assert sorted(stored) == sorted(m.pk for m in sent) and len(stored) == 50
    for message, payload, key in zip(sent, payloads, keys, strict=True):
        row = stored[message.pk]
        assert (row.payload, row.headers, row.group_key, row.priority) == (payload, headers, key, -7)
        assert row.sent_at == message.sent_at


def test_ack_and_claim_is_one_transaction():
    queue = djqueue.create_queue("hp.both")
    djqueue.send_batch(queue, [{"n": i} for i in range(6)])
    first = djqueue.receive(queue, max_messages=3)
    first[0].extend(60)  # still ours: acked
    stale = first[1]
    Message.objects.filter(pk=stale.pk).update(lease_token="someone-else")
    with CaptureQueriesContext(connection) as queries:
        acked, claimed = ack_and_claim(first, [queue], 3, owner="w1")
    assert sorted(m.pk for m in acked) == sorted([first[0].pk, first[2].pk])
    assert len(claimed) == 3 and {m.state for m in claimed} == {State.CLAIMED}
    assert History.objects.filter(pk__in=[m.pk for m in acked]).count() == 2
    assert Message.objects.filter(pk=stale.pk, state=State.CLAIMED).exists()
    statements = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    if "COMMIT" in statements:  # Django >= 6 logs transaction control too
        assert statements.count("BEGIN") == statements.count("COMMIT") == 1, statements
        assert (statements.index("BEGIN") < statements.index("DELETE")
                < statements.index("UPDATE") < statements.index("COMMIT")), statements


@needs_row_locks  # and SQLite turns an overflowing integer into a real: no error
def test_a_failing_claim_rolls_its_acks_back():
    queue = djqueue.create_queue("hp.rollback")
    djqueue.send_batch(queue, [{"n": i} for i in range(3)])
    held = djqueue.receive(queue, max_messages=2)
    overflow = compile_condition("9223372036854775807 + 9223372036854775807 > 0")
    with pytest.raises(InvalidCondition):
        claim_ready([queue], 1, owner="w1", visibility_timeout=None, clock=PromotionClock(),
                    where=overflow, acks=held)
    assert not History.objects.exists()
    assert Message.objects.filter(state=State.CLAIMED).count() == 2


def test_ack_copies_and_locks_by_lease_in_one_statement_and_refuses_lost_leases():
    queue = djqueue.create_queue("hp.ack")
    djqueue.send_batch(queue, [{"n": i} for i in range(8)])
    first = djqueue.receive(queue, max_messages=4)
    second = djqueue.receive(queue, max_messages=4)
    with CaptureQueriesContext(connection) as queries:
        assert len(djqueue.ack_many(first[:2])) == 2
    writes = [q["sql"].split()[0].upper() for q in queries.captured_queries
              if q["sql"].split()[0].upper() in {"SELECT", "INSERT", "DELETE", "UPDATE"}]
    assert writes == ["INSERT", "DELETE"], writes  # no separate lock read
    # Two leases in one call, one message lost to another receiver, one already gone.
    Message.objects.filter(pk=second[0].pk).update(lease_token="someone-else")
    Message.objects.filter(pk=first[2].pk).delete()
    acked = djqueue.ack_many([first[2], first[3], *second])
    assert sorted(m.pk for m in acked) == sorted([first[3].pk, *[m.pk for m in second[1:]]])
    assert Message.objects.filter(pk=second[0].pk, state=State.CLAIMED).exists()
    finished = set(History.objects.values_list("pk", flat=True))
    assert finished == {m.pk for m in [*first[:2], first[3], *second[1:]]}
    assert not Message.objects.filter(pk__in=finished).exists()


def test_an_ack_of_several_claims_pairs_each_token_with_its_own_claims_messages():
    """Each claim's token is tested against that claim's ids only: a message presented
    with another claim's (valid) token is refused, and the rest of both claims is acked."""
    import copy

    queue = djqueue.create_queue("hp.claims")
    djqueue.send_batch(queue, [{"n": i} for i in range(9)])
    claims = [djqueue.receive(queue, max_messages=3) for _ in range(3)]
    forged = copy.copy(claims[0][0])
    forged.lease_token = claims[1][0].lease_token  # a token held, but not for this message
    acked = djqueue.ack_many([forged, *claims[0][1:], *claims[1], *claims[2]])
    assert sorted(m.pk for m in acked) == sorted(
        m.pk for m in [*claims[0][1:], *claims[1], *claims[2]])
    assert Message.objects.get(pk=forged.pk).state == State.CLAIMED


def test_short_transaction_commits_rolls_back_and_runs_hooks_after_commit():
    from django.db import transaction

    from djqueue.storage import dialects

    queue = djqueue.create_queue("hp.txn")
    ran = []
    with CaptureQueriesContext(connection) as queries, dialects.short_transaction("default"):
        djqueue.send_batch(queue, [{"n": 1}, {"n": 2}])
        transaction.on_commit(lambda: ran.append(Message.objects.filter(queue=queue).count()))
        assert ran == []
        with transaction.atomic():  # nested: a savepoint
            djqueue.send(queue, {"n": 3})
    assert ran == [3] and connection.get_autocommit() and not connection.in_atomic_block
    sql = " ".join(q["sql"].upper() for q in queries.captured_queries)
    if connection.vendor == "mysql":
        assert "AUTOCOMMIT" not in sql, sql  # BEGIN ... COMMIT, no toggles
    with pytest.raises(ZeroDivisionError), dialects.short_transaction("default"):
        djqueue.send_batch(queue, [{"n": 4}, {"n": 5}])
        transaction.on_commit(lambda: ran.append("never"))
        raise ZeroDivisionError("the block fails after its writes")
    assert Message.objects.filter(queue=queue).count() == 3 and ran == [3]
    assert connection.get_autocommit() and not connection.in_atomic_block
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@autocommit")
            assert cursor.fetchone() == (1,)  # the session is back in autocommit mode
            if connection.mysql_is_mariadb:  # (MySQL has no such variable)
                cursor.execute("SELECT @@in_transaction")
                assert cursor.fetchone() == (0,)


def test_upsert_keeps_shared_and_varying_values_byte_for_byte():
    from djqueue.models import TaskRecord

    now = timezone.now()
    records = [message_inserts.build(TaskRecord, id=f"r{i}", task_path=TRICKY[i % 2], backend="default",
                          queue_name=TRICKY[3], enqueued_at=now, finished_at=now,
                          args=[TRICKY[i % len(TRICKY)], i], kwargs={"k": TRICKY[4]},
                          return_value=TRICKY[5] if i % 2 else None, status="SUCCESSFUL",
                          worker_ids=[TRICKY[2]], priority=-3)
               for i in range(12)]
    message_inserts.upsert("default", records[:6], ["status"])
    for record in records:
        record.status = "FAILED"
    message_inserts.upsert("default", records, ["status", "return_value"])  # 6 updates, 6 inserts
    stored = {r.pk: r for r in TaskRecord.objects.all()}
    assert sorted(stored) == sorted(r.pk for r in records)
    for record in records:
        row = stored[record.pk]
        assert (row.task_path, row.queue_name, row.args, row.kwargs, row.return_value,
                row.status, row.worker_ids, row.priority, row.finished_at) == (
            record.task_path, record.queue_name, record.args, record.kwargs,
            record.return_value, "FAILED", record.worker_ids, -3, now)


def test_postgresql_upserts_task_records_as_one_json_document():
    """The upserts above go through json_rows on PostgreSQL (one parameter, a statement
    text that never changes), and through the placeholders elsewhere."""
    from djqueue.models import TaskRecord
    from djqueue.storage.statements import json_rows

    assert json_rows.applies(connection, TaskRecord._meta) == (connection.vendor == "postgresql")
    now = timezone.now()
    records = [message_inserts.build(TaskRecord, id=f"j{i}", task_path="t.p", backend="default",
                                     enqueued_at=now, return_value={"n": i, "s": TRICKY[i]},
                                     status="SUCCESSFUL") for i in range(len(TRICKY))]
    with CaptureQueriesContext(connection) as queries:
        message_inserts.upsert("default", records, ["status"])
    assert len(queries.captured_queries) == 1
    if connection.vendor == "postgresql":
        assert "json_populate_recordset" in queries.captured_queries[0]["sql"]
    stored = dict(TaskRecord.objects.values_list("id", "return_value"))
    assert stored == {r.pk: r.return_value for r in records}


def test_rendered_rows_upsert_what_parameters_would():
    """Rows escaped ahead by render_row (on a handler thread, with its small-value cache)
    write the same values as parameters; off MySQL there is nothing to render."""
    from djqueue.models import TaskRecord

    now = timezone.now()

    def make(i: int, status: str) -> TaskRecord:
        return message_inserts.build(TaskRecord, id=f"t{i}", task_path=TRICKY[i % 2], backend="default",
                          queue_name=TRICKY[3], enqueued_at=now, started_at=now,
                          finished_at=now, args=[TRICKY[i % len(TRICKY)], i],
                          kwargs={} if i % 3 else {"k": TRICKY[4]},
                          return_value=[TRICKY[5]] if i % 2 else TRICKY[i % len(TRICKY)],
                          status=status, worker_ids=[TRICKY[2]], errors=[], priority=-3)

    first = [make(i, "RUNNING") for i in range(8)]
    again = [make(i, "SUCCESSFUL") for i in range(12)]  # 8 updates, 4 inserts
    for records in (first, again):
        rendered = [message_inserts.render_row("default", r) for r in records]
        if connection.vendor != "mysql":
            assert rendered == [None] * len(records)
            rendered = None
        message_inserts.upsert("default", records, ["status", "return_value", "kwargs"],
                    rendered=rendered)
    stored = {r.pk: r for r in TaskRecord.objects.all()}
    assert sorted(stored) == sorted(r.pk for r in again)
    for record in again:
        row = stored[record.pk]
        assert (row.task_path, row.queue_name, row.args, row.kwargs, row.return_value,
                row.status, row.worker_ids, row.errors, row.priority, row.started_at) == (
            record.task_path, record.queue_name, record.args, record.kwargs,
            record.return_value, "SUCCESSFUL", [TRICKY[2]], [], -3, now)


def test_built_messages_equal_model_init_and_respect_init_receivers():
    from django.db.models.signals import post_init

    queue = djqueue.create_queue("hp.build")
    fast = djqueue.send_batch(queue, [{"n": 1}, {"n": 2}], delay=30, priority=3)
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=Message)
    try:
        slow = djqueue.send_batch(queue, [{"n": 1}, {"n": 2}], delay=30, priority=3)
    finally:
        post_init.disconnect(receiver, sender=Message)
    assert seen == slow  # with a receiver, each message went through Model.__init__
    volatile = {"id", "visible_at", "sent_at"}
    for a, b in zip(fast, slow, strict=True):
        assert {k: v for k, v in field_values(a).items() if k not in volatile} == {
            k: v for k, v in field_values(b).items() if k not in volatile}
        assert b.visible_at - b.sent_at == a.visible_at - a.sent_at == timedelta(seconds=30)
    stored = {m.pk: field_values(m) for m in Message.objects.filter(queue=queue)}
    assert all(field_values(m) == stored[m.pk] for m in [*fast, *slow])


def test_finished_record_rows_from_templates_equal_the_generic_rendering():
    """A finished task's record row from the task runner's templates (shared values
    escaped once per task, backend, queue, priority and outcome) is byte for byte the
    row render_row escapes value by value, and is written as such."""
    from datetime import UTC, datetime
    from datetime import timezone as dt_timezone

    from djqueue.models import TaskRecord, TaskStatus
    from djqueue.tasks.task_handler import _record_rows

    now = timezone.now()
    later = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=dt_timezone(timedelta(hours=2)))

    def make(i: int) -> TaskRecord:
        return message_inserts.build(
            TaskRecord, id=str(1000 + i), task_path=TRICKY[i % 2], backend="default",
            queue_name=TRICKY[3], priority=-3 + i % 2,
            run_after=(None, later, now)[i % 3], args=[TRICKY[i % len(TRICKY)], i],
            kwargs={} if i % 3 else {"k": TRICKY[4]},
            status=(TaskStatus.SUCCESSFUL, TaskStatus.FAILED, "SUCCESSFUL")[i % 3],
            enqueued_at=now, started_at=now.replace(microsecond=i), finished_at=now,
            last_attempted_at=now.replace(tzinfo=None).replace(tzinfo=UTC),
            return_value=(None, [TRICKY[5]], {"n": i})[i % 3],
            errors=[] if i % 2 else [{"exception_class_path": TRICKY[0], "traceback": TRICKY[3]}],
            worker_ids=[TRICKY[2], f"w{i}"], message_id=1000 + i, unique_key=None)

    records = [make(i) for i in range(12)]
    generic = [message_inserts.render_row("default", r) for r in records]
    templated = [message_inserts.render_row("default", r, _record_rows) for r in records]
    assert templated == generic
    if connection.vendor != "mysql":
        assert templated == [None] * len(records)
        return
    assert [_record_rows.render(connection, r) for r in records] == generic  # none fell back
    message_inserts.upsert("default", records, ["status"], rendered=templated)
    stored = {r.pk: r for r in TaskRecord.objects.all()}
    for record in records:
        row = stored[record.pk]
        assert (row.task_path, row.queue_name, row.run_after, row.args, row.kwargs,
                row.status, row.return_value, row.errors, row.worker_ids,
                row.started_at) == (
            record.task_path, record.queue_name, record.run_after, record.args,
            record.kwargs, record.status, record.return_value, record.errors,
            record.worker_ids, record.started_at)


def test_task_results_built_for_json_values_equal_the_constructors():
    """to_task_result(from_json=True), which skips TaskResult's normalisation of values
    decoded from JSON, gives what TaskResult's constructor gives, in every status."""
    from djqueue.models import TaskRecord, TaskStatus
    from djqueue.tasks.compat import TaskResult
    from djqueue.tasks.records import to_task_result
    from tests.tasks import add

    now = timezone.now()
    for status in TaskStatus:
        record = message_inserts.build(
            TaskRecord, id="r1", task_path=add.module_path, backend="default",
            queue_name="default", args=[1, [2, {"a": None}]], kwargs={"k": "v"},
            status=status, enqueued_at=now, started_at=now, finished_at=now,
            last_attempted_at=now, return_value={"sum": 3},
            errors=[{"exception_class_path": "builtins.ValueError", "traceback": "tb"}],
            worker_ids=["w1", "w2"])
        fast = to_task_result(record, from_json=True)
        slow = to_task_result(record)
        assert type(fast) is TaskResult
        assert fast == slow
        assert fast._return_value == slow._return_value == (
            {"sum": 3} if status == TaskStatus.SUCCESSFUL else None)
        assert fast.attempts == 2 and fast.is_finished == slow.is_finished
