"""The statements that hand a group on (djqueue.storage.statements.group_statements), on
each database: what they change, and keys that look like SQL kept as values."""

from datetime import timedelta

import pytest
from django.utils import timezone

import djqueue
from djqueue.models import Message, MessageGroup, State
from djqueue.storage.statements import group_statements

pytestmark = pytest.mark.django_db(transaction=True)
ODD = "k'); DROP TABLE djqueue_message; --"


def test_last_acked_only_moves_up_and_only_for_the_keys_named():
    queue = djqueue.create_queue("gs.last", ordered=True)
    for key, last in (("a", 5), (ODD, None), ("c", 1)):
        MessageGroup.objects.create(queue=queue, key=key, last_acked_id=last)
    group_statements.raise_last_acked("default", queue.pk, {"a": 3, ODD: 7})
    assert dict(MessageGroup.objects.values_list("key", "last_acked_id")) == {
        "a": 5, ODD: 7, "c": 1}


def test_holders_heads_and_promotion():
    queue = djqueue.create_queue("gs.heads", ordered=True)
    now = timezone.now()

    def row(key: str, state: State, later: bool = False) -> Message:
        return Message.objects.create(queue=queue, body="{}", group_key=key, state=state,
                                      visible_at=now + timedelta(hours=1) if later else now)

    row("a", State.READY)
    row("a", State.CLAIMED)
    first_odd, _ = row(ODD, State.WAITING, later=True), row(ODD, State.WAITING)
    first_b, _ = row("b", State.WAITING), row("b", State.WAITING)
    row("c", State.WAITING)
    assert group_statements.holders("default", queue.pk, ["a", "b", ODD]) == {"a": 2}
    heads = group_statements.waiting_heads("default", queue.pk, [ODD, "b"])
    assert sorted(heads) == sorted([first_odd.pk, first_b.pk])
    ready = row("d", State.READY)
    assert group_statements.promote("default", [*heads, ready.pk], timezone.now()) == 2
    states = dict(Message.objects.filter(pk__in=[*heads, ready.pk]).values_list("pk", "state"))
    assert states == {first_odd.pk: State.SCHEDULED, first_b.pk: State.READY,
                      ready.pk: State.READY}
    assert Message.objects.filter(state=State.WAITING).count() == 3


def test_lock_rows_creates_missing_groups_and_keeps_what_the_others_hold():
    """group_statements.lock_rows: a missing key gets a row with the model's defaults;
    an existing one keeps its last ack and tokens and gets the new touch time."""
    queue = djqueue.create_queue("gs.lock", ordered=True)
    other = djqueue.create_queue("gs.lock.other", ordered=True)
    earlier = timezone.now() - timedelta(hours=1)
    MessageGroup.objects.create(queue=queue, key="a", last_acked_id=9, tokens=2.5,
                                refilled_at=100.0, touched_at=earlier)
    now = timezone.now()
    group_statements.lock_rows("default", [(queue.pk, "a"), (queue.pk, ODD), (other.pk, "a")],
                               now)
    rows = {(g.queue_id, g.key): g for g in MessageGroup.objects.all()}
    assert set(rows) == {(queue.pk, "a"), (queue.pk, ODD), (other.pk, "a")}
    kept = rows[(queue.pk, "a")]
    assert (kept.last_acked_id, kept.tokens, kept.refilled_at) == (9, 2.5, 100.0)
    assert kept.touched_at == now
    made = rows[(queue.pk, ODD)]
    defaults = MessageGroup(queue=queue, key=ODD)
    assert (made.last_acked_id, made.tokens, made.refilled_at, made.throttled_until) == (
        defaults.last_acked_id, defaults.tokens, defaults.refilled_at, defaults.throttled_until)
    assert made.touched_at == now
