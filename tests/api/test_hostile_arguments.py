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


#: name -> a call taking the odd value in one argument's place.
CALLS: dict[str, Callable[[Any], Any]] = {
    "send(delay)": lambda v: djqueue.send("h.args", {}, delay=v),
    "send(priority)": lambda v: djqueue.send("h.args", {}, priority=v),
    "send(headers)": lambda v: djqueue.send("h.args", {}, headers=v),
    "send(group_key)": lambda v: djqueue.send("h.args", {}, group_key=v),
    "send(dedup_key)": lambda v: djqueue.send("h.args", {}, dedup_key=v),
    "send(timeout)": lambda v: djqueue.send("h.args", {}, block=True, timeout=v),
    "send(expires)": lambda v: djqueue.send("h.args", {}, expires=v),
    "send_batch(payloads)": lambda v: djqueue.send_batch("h.args", v),
    "send_batch(group_keys)": lambda v: djqueue.send_batch("h.args", [1, 2], group_keys=v),
    "asend(delay)": lambda v: djqueue.asend("h.args", {}, delay=v),
    "asend_batch(group_keys)": lambda v: djqueue.asend_batch("h.args", [1], group_keys=v),
    "send(payload)": lambda v: djqueue.send("h.args", v),
    "send(queue)": lambda v: djqueue.send(v, {}),
    "receive(queues)": lambda v: djqueue.receive(v),
    "receive(wait)": lambda v: djqueue.receive("h.args", wait=v),
    "areceive(wait)": lambda v: djqueue.areceive("h.args", wait=v),
    "receive(max_messages)": lambda v: djqueue.receive("h.args", max_messages=v),
    "receive(visibility_timeout)": lambda v: djqueue.receive("h.args", visibility_timeout=v),
    "receive(owner)": lambda v: djqueue.receive("h.args", owner=v),
    "receive(where)": lambda v: djqueue.receive("h.args", where=v),
    "areceive(max_messages)": lambda v: djqueue.areceive("h.args", max_messages=v),
    "ack_many(messages)": lambda v: djqueue.ack_many(v),
    "peek(state)": lambda v: djqueue.peek("h.args", state=v),
    "peek(older_than)": lambda v: djqueue.peek("h.args", older_than=v),
    "peek(limit)": lambda v: djqueue.peek("h.args", limit=v),
    "redrive(limit)": lambda v: djqueue.redrive("h.args", limit=v),
    "redrive(ids)": lambda v: djqueue.redrive("h.args", ids=v),
    "delete(message)": lambda v: djqueue.delete(v),
    "delete_batch(ids)": lambda v: djqueue.delete_batch(v),
    "get_message(message_id)": lambda v: djqueue.get_message(v),
    "finished(message_id)": lambda v: djqueue.finished(v),
    "message_trace(message_id)": lambda v: djqueue.message_trace(v),
    "create_queue(name)": lambda v: djqueue.create_queue(v),
    "create_queue(max_attempts)": lambda v: djqueue.create_queue(fresh("h.new"), max_attempts=v),
    "create_queue(visibility_timeout)":
        lambda v: djqueue.create_queue(fresh("h.new"), visibility_timeout=v),
    "create_queue(backoff)": lambda v: djqueue.create_queue(fresh("h.new"), backoff=v),
    "create_queue(rate_limit)": lambda v: djqueue.create_queue(fresh("h.new"), rate_limit=v),
    "create_queue(max_depth)": lambda v: djqueue.create_queue(fresh("h.new"), max_depth=v),
    "create_queue(retry_jitter)": lambda v: djqueue.create_queue(fresh("h.new"), retry_jitter=v),
    "create_queue(partitions)": lambda v: djqueue.create_queue(fresh("h.new"), partitions=v),
    "create_queue(ordered)": lambda v: djqueue.create_queue(fresh("h.new"), ordered=v),
    "create_queue(message_ttl)": lambda v: djqueue.create_queue(fresh("h.new"), message_ttl=v),
    "create_queue(retention)": lambda v: djqueue.create_queue(fresh("h.new"), retention=v),
    "create_queue(dead_letter_queue)":
        lambda v: djqueue.create_queue(fresh("h.new"), dead_letter_queue=v),
    "create_queue(exist_ok)": lambda v: djqueue.create_queue("h.args", exist_ok=v),
    "set_limits(group_concurrency)":
        lambda v: djqueue.set_limits("h.args", group_concurrency=v),
    "set_limits(rate_burst)": lambda v: djqueue.set_limits("h.args", rate_burst=v),
    "pause(ref)": lambda v: djqueue.pause(v),
    "get_queue(ref)": lambda v: djqueue.get_queue(v),
    "report_progress(fraction)": lambda v: djqueue.report_progress(v),
    "get_logs(message)": lambda v: djqueue.get_logs(v),
    "task_progress(result_id)": lambda v: djqueue.task_progress(v),
    "get_workflow(workflow_id)": lambda v: djqueue.get_workflow(v),
    "step(task)": lambda v: djqueue.step(v),
    "chain(parts)": lambda v: djqueue.chain(v),
    "set_limits(concurrency_limit)":
        lambda v: djqueue.set_limits("h.args", concurrency_limit=v),
    "set_limits(rate_limit)": lambda v: djqueue.set_limits("h.args", rate_limit=v),
    "create_topic(retention)": lambda v: djqueue.create_topic(fresh("h.new-topic"), retention=v),
    "publish(priority)": lambda v: djqueue.publish("h.topic", {}, priority=v),
    "publish(headers)": lambda v: djqueue.publish("h.topic", {}, headers=v),
    "publish_batch(payloads)": lambda v: djqueue.publish_batch("h.topic", v),
    "subscribe(group)": lambda v: djqueue.subscribe("h.topic", v),
    "subscribe(mode)": lambda v: djqueue.subscribe("h.topic", fresh("g"), mode=v),
    "subscribe(max_attempts)":
        lambda v: djqueue.subscribe("h.topic", fresh("g"), mode="broadcast", max_attempts=v),
    "register_consumer(consumer)": lambda v: djqueue.register_consumer("h.topic", "g", v),
    "reset_group(to)": lambda v: djqueue.reset_group("h.topic", "g", to=v),
    "drain(queues)": lambda v: djqueue.drain(v),
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


@pytest.mark.parametrize("call", CALLS)
def test_an_odd_argument_gets_djqueues_own_error_and_changes_nothing(call):
    djqueue.create_queue("h.args")
    djqueue.create_topic("h.topic")
    djqueue.subscribe("h.topic", "g", mode="broadcast")
    djqueue.send("h.args", {"n": 1})
    wrong = []
    for value in ODD:
        before = database_rows()
        try:
            result = CALLS[call](value)
            if asyncio.iscoroutine(result):
                run_async(result)
        except DjqueueError as error:
            assert str(error), value
        except (TypeError, ObjectDoesNotExist) as error:  # a lookup's: no such row
            if not raised_by_djqueue(error):
                wrong.append(f"{value!r:.40}: {type(error).__name__}: {error}")
        except Exception as error:
            wrong.append(f"{value!r:.40}: {type(error).__name__}: {error}")
        else:
            continue
        assert database_rows() == before, value
    assert not wrong, "\n".join(wrong)
