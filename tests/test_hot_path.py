"""The hot path's own statements (djqueue.rows) give what the ORM would, on every database:
messages loaded from claim rows, batch inserts with their shared values escaped once,
and a worker's ack and next claim in one transaction."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import djqueue
from djqueue import rows
from djqueue.claims import PromotionClock, ack_and_claim, claim_ready
from djqueue.conditions import compile_condition
from djqueue.exceptions import InvalidCondition
from djqueue.models import History, Message, State
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
        loaded = rows.load_messages("default", cursor.fetchall())
    expected = list(Message.objects.order_by("id"))
    assert [field_values(m) for m in loaded] == [field_values(m) for m in expected]
    assert loaded[0].errors and loaded[0].errors[-1]["error"] == "boom"
    assert loaded[0].headers == {"a": [1, 2], "b": None}
    assert loaded[1].visible_at > timezone.now() + timedelta(minutes=59)
    assert all(not m._state.adding and m._state.db == "default" for m in loaded)


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
