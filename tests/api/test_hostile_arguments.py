"""Every argument of the public Python API, given each of a set of values no caller
should pass: the call succeeds, or raises djqueue's own error (a DjqueueError, or a
TypeError djqueue raised itself, saying what it takes, or a lookup's DoesNotExist),
and a refused call leaves the database as it was. A TypeError or AttributeError from
deep inside (``'int' object is not iterable``) is what this catches;
tests/http/test_hostile_input.py does the same for the HTTP API."""

from __future__ import annotations

import asyncio
import itertools
import math
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ObjectDoesNotExist

import djqueue
from djqueue.exceptions import DjqueueError
from djqueue.models import ConsumerGroup, History, Message, Queue, Topic
from tests.conftest import run_async

pytestmark = pytest.mark.django_db(transaction=True)

DJQUEUE = str(Path(djqueue.__file__).parent)
ODD = ["x", "", "x" * 5000, "a\x00b", -1, 0, -0.0, True, None, 10**30, 1e308, math.nan,
       math.inf, [1], [None], {"a": 1}, b"x", datetime(2030, 1, 1), timedelta(days=-1),
       object()]

#: A name no earlier call made: a value one call accepts creates its queue, topic or
#: group, and the next value's call must not be refused for the name alone.
_names = itertools.count()


def fresh(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


#: name -> a call on queue ``q`` taking the odd value ``v`` in one argument's place.
CALLS: dict[str, Callable[[str, Any], Any]] = {
    "send(delay)": lambda q, v: djqueue.send(q, {}, delay=v),
    "send(priority)": lambda q, v: djqueue.send(q, {}, priority=v),
    "send(headers)": lambda q, v: djqueue.send(q, {}, headers=v),
    "send(group_key)": lambda q, v: djqueue.send(q, {}, group_key=v),
    "send(dedup_key)": lambda q, v: djqueue.send(q, {}, dedup_key=v),
    "send(timeout)": lambda q, v: djqueue.send(q, {}, block=True, timeout=v),
    "send(expires)": lambda q, v: djqueue.send(q, {}, expires=v),
    "send_batch(payloads)": lambda q, v: djqueue.send_batch(q, v),
    "send_batch(group_keys)": lambda q, v: djqueue.send_batch(q, [1, 2], group_keys=v),
    "asend(delay)": lambda q, v: djqueue.asend(q, {}, delay=v),
    "asend_batch(group_keys)": lambda q, v: djqueue.asend_batch(q, [1], group_keys=v),
    "send(payload)": lambda q, v: djqueue.send(q, v),
    "send(queue)": lambda q, v: djqueue.send(v, {}),
    "receive(queues)": lambda q, v: djqueue.receive(v),
    "receive(wait)": lambda q, v: djqueue.receive(q, wait=v),
    "areceive(wait)": lambda q, v: djqueue.areceive(q, wait=v),
    "receive(max_messages)": lambda q, v: djqueue.receive(q, max_messages=v),
    "receive(visibility_timeout)": lambda q, v: djqueue.receive(q, visibility_timeout=v),
    "receive(owner)": lambda q, v: djqueue.receive(q, owner=v),
    "receive(where)": lambda q, v: djqueue.receive(q, where=v),
    "areceive(max_messages)": lambda q, v: djqueue.areceive(q, max_messages=v),
    "ack_many(messages)": lambda q, v: djqueue.ack_many(v),
    "peek(state)": lambda q, v: djqueue.peek(q, state=v),
    "peek(older_than)": lambda q, v: djqueue.peek(q, older_than=v),
    "peek(limit)": lambda q, v: djqueue.peek(q, limit=v),
    "redrive(limit)": lambda q, v: djqueue.redrive(q, limit=v),
    "redrive(ids)": lambda q, v: djqueue.redrive(q, ids=v),
    "delete(message)": lambda q, v: djqueue.delete(v),
    "delete_batch(ids)": lambda q, v: djqueue.delete_batch(v),
    "get_message(message_id)": lambda q, v: djqueue.get_message(v),
    "finished(message_id)": lambda q, v: djqueue.finished(v),
    "message_trace(message_id)": lambda q, v: djqueue.message_trace(v),
    "create_queue(name)": lambda q, v: djqueue.create_queue(v),
    "create_queue(max_attempts)": lambda q, v: djqueue.create_queue(fresh("h.new"), max_attempts=v),
    "create_queue(visibility_timeout)":
        lambda q, v: djqueue.create_queue(fresh("h.new"), visibility_timeout=v),
    "create_queue(backoff)": lambda q, v: djqueue.create_queue(fresh("h.new"), backoff=v),
    "create_queue(rate_limit)": lambda q, v: djqueue.create_queue(fresh("h.new"), rate_limit=v),
    "create_queue(max_depth)": lambda q, v: djqueue.create_queue(fresh("h.new"), max_depth=v),
    "create_queue(retry_jitter)": lambda q, v: djqueue.create_queue(fresh("h.new"), retry_jitter=v),
    "create_queue(partitions)": lambda q, v: djqueue.create_queue(fresh("h.new"), partitions=v),
    "create_queue(ordered)": lambda q, v: djqueue.create_queue(fresh("h.new"), ordered=v),
    "create_queue(message_ttl)": lambda q, v: djqueue.create_queue(fresh("h.new"), message_ttl=v),
    "create_queue(retention)": lambda q, v: djqueue.create_queue(fresh("h.new"), retention=v),
    "create_queue(dead_letter_queue)":
        lambda q, v: djqueue.create_queue(fresh("h.new"), dead_letter_queue=v),
    "create_queue(database)": lambda q, v: djqueue.create_queue(fresh("h.new"), database=v),
    "create_queue(exist_ok)": lambda q, v: djqueue.create_queue(q, exist_ok=v),
    "set_limits(group_concurrency)":
        lambda q, v: djqueue.set_limits(q, group_concurrency=v),
    "set_limits(rate_burst)": lambda q, v: djqueue.set_limits(q, rate_burst=v),
    "pause(ref)": lambda q, v: djqueue.pause(v),
    "get_queue(ref)": lambda q, v: djqueue.get_queue(v),
    "report_progress(fraction)": lambda q, v: djqueue.report_progress(v),
    "get_logs(message)": lambda q, v: djqueue.get_logs(v),
    "task_progress(result_id)": lambda q, v: djqueue.task_progress(v),
    "get_workflow(workflow_id)": lambda q, v: djqueue.get_workflow(v),
    "step(task)": lambda q, v: djqueue.step(v),
    "chain(parts)": lambda q, v: djqueue.chain(v),
    "set_limits(concurrency_limit)":
        lambda q, v: djqueue.set_limits(q, concurrency_limit=v),
    "set_limits(rate_limit)": lambda q, v: djqueue.set_limits(q, rate_limit=v),
    "create_topic(retention)": lambda q, v: djqueue.create_topic(fresh("h.new-topic"), retention=v),
    "publish(priority)": lambda q, v: djqueue.publish("h.topic", {}, priority=v),
    "publish(headers)": lambda q, v: djqueue.publish("h.topic", {}, headers=v),
    "publish_batch(payloads)": lambda q, v: djqueue.publish_batch("h.topic", v),
    "subscribe(group)": lambda q, v: djqueue.subscribe("h.topic", v),
    "subscribe(mode)": lambda q, v: djqueue.subscribe("h.topic", fresh("g"), mode=v),
    "subscribe(max_attempts)":
        lambda q, v: djqueue.subscribe("h.topic", fresh("g"), mode="broadcast", max_attempts=v),
    "register_consumer(consumer)": lambda q, v: djqueue.register_consumer("h.topic", "g", v),
    "reset_group(to)": lambda q, v: djqueue.reset_group("h.topic", "g", to=v),
    "drain(queues)": lambda q, v: djqueue.drain(v),
    "purge(queue)": lambda q, v: djqueue.purge(v),
    "resume(ref)": lambda q, v: djqueue.resume(v),
    "get_progress(message)": lambda q, v: djqueue.get_progress(v),
    "is_stale(message)": lambda q, v: djqueue.is_stale(v),
    "group_lag(group)": lambda q, v: djqueue.group_lag("h.topic", v),
    "group_lag(topic)": lambda q, v: djqueue.group_lag(v, "g"),
    "group_queues(group)": lambda q, v: djqueue.group_queues("h.topic", v),
    "unregister_consumer(consumer)":
        lambda q, v: djqueue.unregister_consumer("h.topic", "g", v),
    "publish(topic)": lambda q, v: djqueue.publish(v, {}),
    "create_topic(name)": lambda q, v: djqueue.create_topic(v),
    "add_partition(alias)": lambda q, v: djqueue.add_partition(q, v),
    "OwnerSession(queues)": lambda q, v: djqueue.OwnerSession(v).next(),
    "OwnerSession(visibility_timeout)":
        lambda q, v: djqueue.OwnerSession(q, visibility_timeout=v).next(),
    "OwnerSession.next(wait)": lambda q, v: djqueue.OwnerSession(q).next(wait=v),
    "report_progress(message)": lambda q, v: djqueue.report_progress(0.5, v),
}


def database_rows() -> tuple:
    return (list(Queue.objects.order_by("pk").values_list("pk", "name", "paused",
                                                          "max_attempts")),
            list(Message.objects.order_by("pk").values_list("pk", "state", "attempts")),
            History.objects.count(), Topic.objects.count(), ConsumerGroup.objects.count())


def raised_by_djqueue(error: BaseException) -> bool:
    """Whether the innermost frame of ``error``'s traceback is djqueue's own code."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(DJQUEUE)


def wrong_error(error: Exception, value: object,
                own: tuple[type[Exception], ...] = (DjqueueError,),
                raised: tuple[type[Exception], ...] = (TypeError, ObjectDoesNotExist),
                ) -> str | None:
    """What is wrong with ``error`` as the answer to the odd ``value``, or None: one of
    ``own`` (with a message) is right, and so is one of ``raised`` (a wrong type, a
    lookup's no such row) that djqueue's own code raised."""
    if isinstance(error, own) and str(error):
        return None
    if isinstance(error, raised) and not isinstance(error, own) and raised_by_djqueue(error):
        return None
    return f"{value!r:.40}: {type(error).__name__}: {error}"


@pytest.mark.parametrize("call", CALLS)
def test_an_odd_argument_gets_djqueues_own_error_and_changes_nothing(call):
    djqueue.create_queue("h.args")
    odd_arguments_get_djqueues_own_errors(CALLS[call], "h.args", database_rows)


def odd_arguments_get_djqueues_own_errors(call: Callable[[str, Any], Any], queue: str,
                                          rows: Callable[[], tuple]) -> None:
    """``call(queue, value)`` for each ODD value (the queue exists): djqueue's own
    error, or none; ``rows()`` the same after a refused call as before it."""
    djqueue.create_topic("h.topic")
    djqueue.subscribe("h.topic", "g", mode="broadcast")
    djqueue.send(queue, {"n": 1})
    wrong = []
    for value in ODD:
        before = rows()
        try:
            result = call(queue, value)
            if asyncio.iscoroutine(result):
                run_async(result)
        except Exception as error:
            wrong.append(wrong_error(error, value))
            assert rows() == before, value
    assert not any(wrong), "\n".join(filter(None, wrong))


#: name -> a call on a received message ``m`` taking the odd value ``v``: what a
#: handler may pass.
MESSAGE_CALLS: dict[str, Callable[[Message, Any], Any]] = {
    "nack(delay)": lambda m, v: m.nack(delay=v),
    "nack(error)": lambda m, v: m.nack(error=v),
    "extend(seconds)": lambda m, v: m.extend(v),
    "progress(fraction)": lambda m, v: m.progress(v),
    "progress(note)": lambda m, v: m.progress(0.5, v),
}


@pytest.mark.parametrize("call", MESSAGE_CALLS)
def test_an_odd_argument_to_a_received_messages_method_gets_djqueues_own_error(call):
    """A refused call leaves the message claimed by its receiver, as it was."""
    djqueue.create_queue("h.held", max_attempts=1000)
    wrong = []
    for value in ODD:
        djqueue.send("h.held", {})
        [message] = djqueue.receive("h.held")
        try:
            MESSAGE_CALLS[call](message, value)
        except Exception as error:
            wrong.append(wrong_error(error, value, raised=(TypeError,)))
            row = Message.objects.get(pk=message.pk)
            assert (row.state, row.attempts, row.owner) == (
                message.state, message.attempts, message.owner), value
        Message.objects.all().delete()
    assert not any(wrong), "\n".join(filter(None, wrong))
