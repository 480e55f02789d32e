"""Ordered groups (EMQ TopicQueue, SQS FIFO message groups), and per-key concurrency.

In a queue with ``ordered`` on, at most one message of a group key *holds* the
group (ready, scheduled or claimed); the rest wait in state WAITING, in id
order. The holder's retries keep holding it. When it leaves (acked, dead-
lettered, deleted) the next waiting message takes over. So the claim query,
which only sees READY rows, can never hand two messages of a group to two
workers, and needs no per-row "is my group busy" check.

``group_concurrency = K`` is the same with K holders instead of one (and no
promise of order between them): at most K messages of a key are ready,
scheduled or claimed, so at most K are in flight, whatever the number of
workers. A holder waiting for its retry keeps its place, as in an ordered
queue. Changing K takes effect as the reaper's repair pass (or
djqueue.api.queues.set_limits) promotes waiting messages into new places.

Every change of holder happens with the group's :class:`MessageGroup` row
locked: a sender deciding "hold or wait" and an ack handing the group on
never miss each other. Groups are locked in (queue, key) order to avoid
deadlocks between batches.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db import transaction

from djqueue.exceptions import shown_value
from djqueue.models import GROUP_HOLDING_STATES, Message, MessageGroup, State
from djqueue.polling import local_wakeup
from djqueue.storage import dialects, fastpath, host_clock
from djqueue.storage.queue_lookup import get_queue_by_id
from djqueue.storage.statements import group_statements

GroupId = tuple[int, str]


def ordered_group(message: Message) -> GroupId | None:
    """The (queue, key) group ``message`` belongs to, if its queue is ordered."""
    if not message.group_key:
        return None
    if not get_queue_by_id(message.queue_id, fastpath.database_of(message)).ordered:
        return None
    return (message.queue_id, message.group_key)


def holding_group(message: Message) -> GroupId | None:
    """The (queue, key) group ``message`` belongs to, if its queue limits how many
    messages of a key may hold it (ordered, or ``group_concurrency``)."""
    if not message.group_key:
        return None
    if get_queue_by_id(message.queue_id, fastpath.database_of(message)).group_holders is None:
        return None
    return (message.queue_id, message.group_key)


#: The places of a group whose queue no longer limits them (its waiting messages all go).
UNLIMITED = 10**9


def places(group: GroupId) -> int:
    """How many messages may hold ``group`` at once."""
    return get_queue_by_id(group[0]).group_holders or UNLIMITED


def lock_groups(db: str, groups: Iterable[GroupId]) -> None:
    """Create-or-lock the group rows, in a fixed order (so that two transactions
    never wait for each other's), until the transaction ends (see
    group_statements.lock_rows)."""
    keys = sorted(set(groups))
    if keys:
        group_statements.lock_rows(db, keys, host_clock.database_now(db))


def holders(db: str, groups: Iterable[GroupId]) -> dict[GroupId, int]:
    """How many messages hold each of ``groups`` (already locked); absent: none."""
    by_queue: dict[int, set[str]] = defaultdict(set)
    for queue_id, key in groups:
        by_queue[queue_id].add(key)
    held: dict[GroupId, int] = {}
    for queue_id, keys in by_queue.items():
        rows = group_statements.holders(db, queue_id, sorted(keys))
        held.update(((queue_id, key), n) for key, n in rows.items())
    return held


def free_places(db: str, groups: Iterable[GroupId]) -> dict[GroupId, int]:
    """The groups among ``groups`` (already locked) with room for more holders, and how
    much."""
    groups = set(groups)
    held = holders(db, groups)
    room = {g: places(g) - held.get(g, 0) for g in groups}
    return {g: n for g, n in room.items() if n > 0}


def enqueue_states(db: str, messages: list[Message]) -> None:
    """Before inserting ``messages`` (in send order): make each one that finds its group's
    places taken wait. Must run in the inserting transaction."""
    grouped = [(m, g) for m in messages if (g := holding_group(m)) is not None]
    if not grouped:
        return
    lock_groups(db, (g for _, g in grouped))
    held = holders(db, (g for _, g in grouped))
    for message, group in grouped:
        if held.get(group, 0) >= places(group):
            message.state = State.WAITING
        else:
            held[group] = held.get(group, 0) + 1


def hand_on(db: str, left: Iterable[Message], *, acked: Iterable[Message] = ()) -> int:
    """After messages left their groups (in this transaction): let each group's next
    waiting message hold it. ``acked`` ones also move the group's ``last_acked_id``.
    Returns how many messages were made deliverable. A handful of statements per
    call, whatever the number of groups."""
    acked_top: dict[GroupId, int] = {}
    for message in acked:
        group = ordered_group(message)
        if group is not None:
            acked_top[group] = max(acked_top.get(group, 0), message.pk)
    groups = {g for m in left if (g := holding_group(m)) is not None} | set(acked_top)
    if not groups:
        return 0
    lock_groups(db, groups)
    _raise_last_acked(db, acked_top)
    return _promote_next(db, free_places(db, groups))


def _raise_last_acked(db: str, acked_top: dict[GroupId, int]) -> None:
    by_queue: dict[int, dict[str, int]] = defaultdict(dict)
    for (queue_id, key), top in acked_top.items():
        by_queue[queue_id][key] = top
    for queue_id, tops in by_queue.items():
        group_statements.raise_last_acked(db, queue_id, tops)


def _promote_next(db: str, free: dict[GroupId, int]) -> int:
    """Make the oldest waiting messages of the ``free`` (locked) groups hold them, as many
    as each has room for: one statement a queue for groups with one free place (the
    usual case), one a group for the others."""
    by_queue: dict[int, list[str]] = defaultdict(list)
    heads: list[int] = []
    for (queue_id, key), room in sorted(free.items()):
        if room == 1:
            by_queue[queue_id].append(key)
        else:
            heads += (Message.objects.using(db)
                      .filter(queue_id=queue_id, group_key=key, state=State.WAITING)
                      .order_by("id").values_list("id", flat=True)[:room])
    for queue_id, keys in by_queue.items():
        heads += group_statements.waiting_heads(db, queue_id, sorted(keys))
    if not heads:
        return 0
    promoted = group_statements.promote(db, heads, host_clock.database_now(db))
    if promoted:
        # Receivers in this process that found the group busy look again at once.
        transaction.on_commit(local_wakeup.notify, using=db)
    return promoted


def rejoin(db: str, message_ids: list[int]) -> None:
    """Messages just moved into a queue as READY (a redrive): in an ordered queue, one
    whose group is held by another message waits behind it. Also clears the group's
    ``last_acked_id`` so the stale guard does not skip a deliberately redriven message."""
    rows = list(Message.objects.using(db).filter(pk__in=message_ids, group_key__isnull=False)
                .only("pk", "queue_id", "group_key", "state"))
    by_group: dict[GroupId, list[Message]] = defaultdict(list)
    for row in rows:
        group = holding_group(row)
        if group is not None:
            by_group[group].append(row)
    if not by_group:
        return
    lock_groups(db, by_group)
    for (queue_id, key), members in sorted(by_group.items()):
        MessageGroup.objects.using(db).filter(queue_id=queue_id, key=key).update(
            last_acked_id=None)
        mine = {m.pk for m in members}
        others_hold = (Message.objects.using(db)
                       .filter(queue_id=queue_id, group_key=key, state__in=GROUP_HOLDING_STATES)
                       .exclude(pk__in=mine).count())
        members.sort(key=lambda m: m.pk)
        room = max(0, places((queue_id, key)) - others_hold)
        waiting = [m.pk for m in members[room:]]
        if waiting:
            Message.objects.using(db).filter(pk__in=waiting).update(state=State.WAITING)


def repair(db: str, queue_ids: Iterable[int]) -> int:
    """Promote the heads of every group that has waiting messages and free places.

    Normal operation never leaves such a group; a purge racing with a send can,
    and so does raising a queue's ``group_concurrency``; so purge and set_limits
    call this, and the reaper runs it now and then as a safety net.
    """
    groups: set[GroupId] = set()
    for queue_id in queue_ids:
        keys = (Message.objects.using(db).filter(queue_id=queue_id, state=State.WAITING)
                .values_list("group_key", flat=True).distinct())
        groups.update((queue_id, key) for key in keys if key is not None)  # (none is)
    if not groups:
        return 0
    lock_groups(db, groups)
    return _promote_next(db, free_places(db, groups))


def is_stale(message: Message) -> bool:
    """The consumer-side guard: is this delivery not newer than the last message acked
    in its group? That happens only to a redelivery after an expired lease, when a
    later message of the group has been processed meanwhile."""
    if not isinstance(message, Message):
        raise TypeError(f"is_stale takes a received Message, not {shown_value(message)}.")
    group = ordered_group(message)
    if group is None:
        return False
    last = (MessageGroup.objects.using(dialects.alias())
            .filter(queue_id=group[0], key=group[1]).values_list("last_acked_id", flat=True)
            .first())
    return last is not None and message.pk <= last
