"""State changes of claimed messages, each one short transaction.

A claimed message is identified by its ``lease_token`` (an SQS receipt handle):
every change checks the token, so a receiver whose lease expired and was
handed to someone else can no longer ack, fail or extend the message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F

from djqueue import durations, signals
from djqueue.exceptions import InvalidMessage, NotOwner, shown_value
from djqueue.models import Event, History, Message, Outcome, Queue, State
from djqueue.storage import (
    dialects,
    fastpath,
    handler_reports,
    host_clock,
    ordered_groups,
    payloads,
    trace,
)
from djqueue.storage.claim_resume import ready_again, row_ready_again
from djqueue.storage.history_copy import archive, archive_leased
from djqueue.storage.queue_lookup import get_queue_by_id
from djqueue.storage.statements import claim_statements, stat_counters
from djqueue.types import AckHook

MAX_ERROR_CHARS = 8000


def ack_many(messages: Iterable[Message]) -> list[Message]:
    """Finish the messages still leased to their holders; returns those acked.

    One transaction: lock the rows still carrying our lease tokens, append
    them to history, delete them by primary key.
    """
    if isinstance(messages, Message) or not isinstance(messages, Iterable):
        raise TypeError(f"ack_many() takes the Messages a receive returned, in a list, say; "
                        f"not {type(messages).__name__}.")
    messages = list(messages)
    if not messages:
        return []
    for message in messages:
        if not isinstance(message, Message):
            raise TypeError(f"ack_many() acks Messages a receive returned, not "
                            f"{type(message).__name__}.")
    by_database = _by_database(messages)
    if len(by_database) > 1:
        return [m for group in by_database.values() for m in ack_many(group)]
    db = _database(messages[0])
    now = host_clock.database_now(db)

    def acking() -> list[Message]:
        with dialects.short_transaction(db):
            return ack_locked(db, messages, now)

    with dialects.using(db):
        owned = dialects.retry_deadlocks(acking)
    if owned:
        signals.messages_acked.send(sender=Message, messages=owned)
    return owned


def ack_locked(db: str, messages: list[Message], now: datetime,
               hook: AckHook | None = None) -> list[Message]:
    """The body of :func:`ack_many`, inside the caller's transaction (which sends
    ``messages_acked`` after its commit). ``hook(db, messages, acked)`` runs once the
    leases are checked, while the acked rows still exist."""
    by_id = {m.pk: m for m in messages}
    messages = list(by_id.values())
    copied = archive_leased(db, messages, Outcome.ACKED, now)
    if copied == len(messages):
        owned = messages
    else:  # some leases were lost (or the fast path does not apply): look at the rows
        owned = [by_id[pk] for pk, state, token in claim_statements.lock_leases(db, list(by_id))
                 if state == State.CLAIMED and token == by_id[pk].lease_token]
        if copied is None and owned:
            archive(db, [m.pk for m in owned], Outcome.ACKED, now)
    if hook is not None:
        hook(db, messages, owned)
    if owned:
        claim_statements.delete(db, [m.pk for m in owned])
        ordered_groups.hand_on(db, owned, acked=owned)
        trace.record(db, owned, Event.ACKED, at=now)
    return owned


def history_row(message: Message, outcome: Outcome, now: datetime) -> History:
    return History(
        id=message.pk, queue_id=message.queue_id, outcome=outcome, priority=message.priority,
        attempts=message.attempts, size=message.size, worker=message.owner,
        group_key=message.group_key,
        sent_at=message.sent_at, claimed_at=message.claimed_at, finished_at=now)


def release(messages: Iterable[Message], *, delay: float | None = None) -> int:
    """Give messages back without counting the delivery (Q4M ``queue_abort``). Returns
    how many were still leased to their receiver (the others are left alone).

    Once the release commits it sends ``djqueue.signals.messages_released``; given back
    without a delay, the messages wake idle receivers of their queues in this and other
    processes, as a send does (djqueue.api.worker_wakeups)."""
    delay = durations.validate_delay(delay)
    messages = list(messages)
    if not messages:
        return 0
    by_database = _by_database(messages)
    if len(by_database) > 1:
        return sum(release(group, delay=delay) for group in by_database.values())
    by_id = {m.pk: m for m in messages}
    db = _database(messages[0])
    now = host_clock.database_now(db)

    def releasing() -> int:
        with transaction.atomic(using=db):
            leased = (Message.objects.using(db).select_for_update().filter(pk__in=list(by_id))
                      .values_list("pk", "state", "lease_token"))
            mine = [by_id[pk] for pk, state, token in leased
                    if state == State.CLAIMED and token == by_id[pk].lease_token]
            if not mine:
                return 0
            ready_again(
                Message.objects.using(db).filter(pk__in=[m.pk for m in mine]),
                state=State.SCHEDULED if delay else State.READY, owner="", lease_token="",
                attempts=F("attempts") - 1, visible_at=now + timedelta(seconds=delay or 0))
            trace.record(db, mine, Event.RELEASED, at=now,
                         detail=f"released, visible again in {delay:g} s" if delay else "")
            transaction.on_commit(lambda: signals.messages_released.send(
                sender=Message, messages=mine, delay=delay, database=db), using=db)
        return len(mine)

    with dialects.using(db):
        return dialects.retry_deadlocks(releasing)


def fail(message: Message, error: str, *, delay: float | None = None,
         dead_letter: bool = False) -> Message:
    """Record a failed delivery; retry after ``delay`` (default: backoff) or dead-letter
    (at once with ``dead_letter``: the message can never be processed)."""
    delay = durations.validate_delay(delay)
    db = _database(message)

    def failing() -> Message:
        # The statistics upsert can be a deadlock victim beside the reaper's (InnoDB's
        # next-key locks on the counters' unique key): the whole transaction runs again.
        with transaction.atomic(using=db):
            found = (Message.objects.using(db).select_for_update()
                     .filter(pk=message.pk, state=State.CLAIMED, lease_token=message.lease_token)
                     .first())
            if found is None:
                raise NotOwner(f"Message {message.pk} is no longer leased to this receiver.")
            record_failure(found, error, host_clock.database_now(db), retry_delay=delay, give_up=dead_letter)
        return found

    with dialects.using(db):
        row = dialects.retry_deadlocks(failing)
    message.state, message.errors, message.queue_id = row.state, row.errors, row.queue_id
    return row


def record_failure(row: Message, error: str, now: datetime, *,
                   retry_delay: float | None = None, give_up: bool = False) -> None:
    """On a locked row: append ``error``, then schedule the retry or dead-letter it (at
    once with ``give_up``)."""
    queue = get_queue_by_id(row.queue_id, fastpath.database_of(row))
    # One character no database stores (a NUL, a lone surrogate) must not lose the failure.
    error = payloads.storable(payloads.as_text(error)[:MAX_ERROR_CHARS])
    row.errors = [*(row.errors or []), {
        "attempt": row.attempts, "at": now.isoformat(), "worker": row.owner, "error": error}]
    db = fastpath.database_of(row) or dialects.alias()
    trace.record(db, [row], Event.NACKED, at=now, detail=error)
    row.owner = row.lease_token = ""
    give_up = give_up or row.attempts >= queue.max_attempts
    stat_counters.count_failure(db, queue.pk, now, dead=give_up)
    if give_up:
        dead_letter(row, queue, now)
    else:
        wait = queue.retry_delay(row.attempts) if retry_delay is None else timedelta(
            seconds=retry_delay)
        row.state = State.SCHEDULED if wait > timedelta(0) else State.READY
        row.visible_at = now + wait
        row_ready_again(row, ["state", "visible_at", "owner", "lease_token", "errors"])
        trace.record(db, [row], Event.RETRIED, at=now,
                     detail=f"attempt {row.attempts + 1} in {wait.total_seconds():g} s")
        signals.message_retried.send(sender=Message, message=row)


def dead_letter(row: Message, queue: Queue, now: datetime) -> None:
    db = fastpath.database_of(row) or dialects.alias()
    row.origin_queue_id = queue.pk
    row.queue_id = queue.dead_letter_queue_id or queue.pk
    row.state = State.DEAD
    row.visible_at = now
    row.save(update_fields=["state", "visible_at", "owner", "lease_token", "errors", "queue",
                            "origin_queue"])
    ordered_groups.hand_on(db, [Message(pk=row.pk, queue_id=queue.pk, group_key=row.group_key)])
    trace.record(db, [row], Event.DEAD_LETTERED, at=now, also_queue_id=queue.pk,
                 detail=f"after {row.attempts} attempts, to queue {row.queue_id}")
    signals.message_dead_lettered.send(sender=Message, message=row)


MAX_LEASE = durations.MAX_LEASE


def extend(message: Message, seconds: float) -> None:
    """Move the lease end to ``seconds`` from now; NotOwner if the lease was lost."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not (
            0 < seconds <= MAX_LEASE):
        raise InvalidMessage(
            f"extend() needs a number of seconds above 0 and at most {MAX_LEASE:g}, "
            f"got {shown_value(seconds)}.")
    db = _database(message)
    until = host_clock.database_now(db) + timedelta(seconds=seconds)
    updated = Message.objects.using(db).filter(
        pk=message.pk, state=State.CLAIMED, lease_token=message.lease_token,
    ).update(visible_at=until)
    if not updated:
        raise NotOwner(f"Message {message.pk} is no longer leased to this receiver.")
    message.visible_at = until


def run_and_ack(message: Message, call: Callable[[], object]) -> None:
    """Exactly-once: run ``call`` and ack ``message`` in one transaction.

    The message row stays locked while ``call`` runs, so the reaper skips it
    even past its lease; if the process dies the transaction rolls back, the
    handler's writes with it, and the message is delivered again.
    """
    db = _database(message)
    with dialects.using(db), dialects.short_transaction(db):
        locked = claim_statements.lock_leases(db, [message.pk])
        if not locked or (locked[0][1], locked[0][2]) != (State.CLAIMED, message.lease_token):
            raise NotOwner(f"Message {message.pk} is no longer leased to this receiver.")
        call()
        owned = ack_locked(db, [message], host_clock.database_now(db))
        if owned:
            transaction.on_commit(
                lambda: signals.messages_acked.send(sender=Message, messages=owned), using=db)


def _database(message: Message) -> str:
    """The database a message was read from (its queue's: djqueue.storage.placement)."""
    return fastpath.database_of(message) or dialects.alias()


def _by_database(messages: list[Message]) -> dict[str, list[Message]]:
    found: dict[str, list[Message]] = {}
    for message in messages:
        found.setdefault(_database(message), []).append(message)
    return found


class _MessageTransitions:
    """``Message.ack()``, ``nack()`` and ``extend()`` (see MessageTransitions)."""

    def ack(self, message: Message) -> None:
        if not ack_many([message]):
            raise NotOwner(f"Message {message.pk} is no longer leased to this receiver.")

    def nack(self, message: Message, delay: float | None, error: str | None) -> None:
        if error is None:
            if not release([message], delay=delay):
                raise NotOwner(f"Message {message.pk} is no longer leased to this receiver.")
        else:
            fail(message, error, delay=delay)

    def extend(self, message: Message, seconds: float) -> None:
        extend(message, seconds)

    def progress(self, message: Message, fraction: float, note: str) -> None:
        handler_reports.progress(message, fraction, note)


Message.transitions = _MessageTransitions()
