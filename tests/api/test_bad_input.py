"""Bad input gets a specific exception and leaves the database exactly as it was."""

import math
from datetime import datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

import djqueue
from djqueue.exceptions import (
    ConfigurationError,
    InvalidCondition,
    InvalidMessage,
    PayloadTooLarge,
    QueueFull,
    QueueNotFound,
)
from djqueue.models import History, Message, Queue

pytestmark = pytest.mark.django_db(transaction=True)


def snapshot():
    return (list(Queue.objects.order_by("pk").values()),
            list(Message.objects.order_by("pk").values()),
            list(History.objects.order_by("pk").values()))


@pytest.fixture
def queues():
    djqueue.create_queue("small", max_payload_bytes=20, max_depth=3)
    djqueue.create_queue("jobs")
    djqueue.send("jobs", {"n": 1})
    djqueue.send_batch("small", [1, 2])
    return snapshot()


CASES = {
    "unknown queue": (lambda: djqueue.send("nope", {}), QueueNotFound),
    "unknown queue, batch": (lambda: djqueue.send_batch("nope", [{}]), QueueNotFound),
    "unknown queue, receive": (lambda: djqueue.receive(["jobs", "nope"]), QueueNotFound),
    "payload not JSON": (lambda: djqueue.send("jobs", {"when": object()}), InvalidMessage),
    "payload with a set": (lambda: djqueue.send("jobs", {1, 2}), InvalidMessage),
    "payload NaN": (lambda: djqueue.send("jobs", math.nan), InvalidMessage),
    "one bad payload in a batch": (
        lambda: djqueue.send_batch("jobs", [{"ok": 1}, {"bad": object()}]), InvalidMessage),
    "payload over the limit": (lambda: djqueue.send("small", "x" * 50), PayloadTooLarge),
    "queue at max depth": (lambda: djqueue.send_batch("small", [3, 4]), QueueFull),
    "negative delay": (lambda: djqueue.send("jobs", {}, delay=-1), InvalidMessage),
    "negative timedelta": (lambda: djqueue.send("jobs", {}, delay=timedelta(seconds=-5)),
                           InvalidMessage),
    "naive send time": (lambda: djqueue.send("jobs", {}, delay=datetime(2030, 1, 1)),
                        InvalidMessage),
    "delay not a number": (lambda: djqueue.send("jobs", {}, delay="soon"), InvalidMessage),
    "priority out of range": (lambda: djqueue.send("jobs", {}, priority=10**6), InvalidMessage),
    "priority not an int": (lambda: djqueue.send("jobs", {}, priority=1.5), InvalidMessage),
    "headers not a dict": (lambda: djqueue.send("jobs", {}, headers=["a"]), InvalidMessage),
    "headers not JSON": (lambda: djqueue.send("jobs", {}, headers={"a": object()}), InvalidMessage),
    "max_messages zero": (lambda: djqueue.receive("jobs", max_messages=0), InvalidMessage),
    "negative wait": (lambda: djqueue.receive("jobs", wait=-1), InvalidMessage),
    "send's timeout not a number": (
        lambda: djqueue.send("jobs", {}, block=True, timeout="soon"), InvalidMessage),
    # A string is iterable: "ab" would have been the keys "a" and "b".
    "group_keys a string": (lambda: djqueue.send_batch("jobs", [1, 2], group_keys="ab"),
                            InvalidMessage),
    "group_keys a number": (lambda: djqueue.send_batch("jobs", [1, 2], group_keys=5),
                            InvalidMessage),
    "bad visibility timeout": (lambda: djqueue.receive("jobs", visibility_timeout=0),
                               InvalidMessage),
    "redrive unknown queue": (lambda: djqueue.redrive("nope"), QueueNotFound),
    "queue option unknown": (lambda: djqueue.create_queue("q2", colour="red"), ConfigurationError),
    "queue name invalid": (lambda: djqueue.create_queue("bad name!"), ConfigurationError),
    # A regex's "$" also matches before a final newline: the name's check ends at "\Z".
    "queue name with a final newline": (lambda: djqueue.create_queue("jobs2\n"),
                                        ConfigurationError),
    "rate with other digits": (lambda: djqueue.create_queue("q5", rate_limit="\u0665/s"),
                               ConfigurationError),
    "queue max_attempts zero": (lambda: djqueue.create_queue("q3", max_attempts=0),
                                ConfigurationError),
    "queue max_attempts not a number": (lambda: djqueue.create_queue("q3", max_attempts="x"),
                                        ConfigurationError),
    "partitions not a list": (lambda: djqueue.create_queue("q3", partitions=5),
                              ConfigurationError),
    "partitions one alias": (lambda: djqueue.create_queue("q3", partitions="default"),
                             ConfigurationError),
    "receive from a number": (lambda: djqueue.receive(5), TypeError),
    "receive from bytes": (lambda: djqueue.receive(b"jobs"), TypeError),
    "ack_many of a string": (lambda: djqueue.ack_many("jobs"), TypeError),
    "ack_many of ids": (lambda: djqueue.ack_many([1, 2]), TypeError),
    "drain a number": (lambda: djqueue.drain(5), TypeError),
    "queue backoff invalid": (lambda: djqueue.create_queue("q4", backoff=[-1]),
                              ConfigurationError),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_raises_and_changes_nothing(queues, case):
    call, expected = CASES[case]
    with pytest.raises(expected) as info:
        call()
    assert type(info.value) is expected
    assert str(info.value)
    assert snapshot() == queues


#: An int past the 4,300 digits Python writes one in: each error message that showed the
#: value failed to be made (a ValueError from int's repr), and a float field's
#: conversion raised OverflowError.
HUGE = 10**5000
HUGE_CASES = {
    "priority": (lambda: djqueue.send("jobs", {}, priority=HUGE), InvalidMessage),
    "delay": (lambda: djqueue.send("jobs", {}, delay=HUGE), InvalidMessage),
    "group_key": (lambda: djqueue.send("jobs", {}, group_key=HUGE), InvalidMessage),
    "dedup_key": (lambda: djqueue.send("jobs", {}, dedup_key=HUGE), InvalidMessage),
    "receive's lease": (lambda: djqueue.receive("jobs", visibility_timeout=HUGE),
                        InvalidMessage),
    "receive's wait": (lambda: djqueue.receive("jobs", wait=-HUGE), InvalidMessage),
    "max_messages": (lambda: djqueue.receive("jobs", max_messages=HUGE), InvalidMessage),
    "max_messages past a claim's": (lambda: djqueue.receive("jobs", max_messages=10_001),
                                    InvalidMessage),
    "peek's limit": (lambda: djqueue.peek("jobs", limit=HUGE), InvalidMessage),
    "redrive's limit": (lambda: djqueue.redrive("jobs", limit=-HUGE), InvalidMessage),
    "queue's visibility timeout": (lambda: djqueue.create_queue("q6", visibility_timeout=HUGE),
                                   ConfigurationError),
    "queue's retention": (lambda: djqueue.create_queue("q6", retention=HUGE),
                          ConfigurationError),
    "a backoff step": (lambda: djqueue.create_queue("q6", backoff=[1, HUGE]),
                       ConfigurationError),
    "a limit": (lambda: djqueue.set_limits("jobs", concurrency_limit=HUGE), ConfigurationError),
    "a topic's retention": (lambda: djqueue.create_topic("t6", retention=HUGE),
                            ConfigurationError),
    "a topic's name": (lambda: djqueue.create_topic(HUGE), ConfigurationError),
    "a dead-letter queue": (lambda: djqueue.create_queue("q6", dead_letter_queue=HUGE),
                            ConfigurationError),
}
#: Text Python holds but no driver encodes (a lone surrogate): each was the driver's
#: UnicodeEncodeError, or the enum's ValueError.
SURROGATE = "a\udcffb"
SURROGATE_CASES = {
    "group_key": (lambda: djqueue.send("jobs", {}, group_key=SURROGATE), InvalidMessage),
    "dedup_key": (lambda: djqueue.send("jobs", {}, dedup_key=SURROGATE), InvalidMessage),
    "owner": (lambda: djqueue.receive("jobs", owner=SURROGATE), InvalidMessage),
    "a condition's literal": (lambda: djqueue.receive("jobs", where=f"group_key = '{SURROGATE}'"),
                              InvalidCondition),
    "a queue's name": (lambda: djqueue.send(SURROGATE, {}), QueueNotFound),
    "a topic's name": (lambda: djqueue.publish(SURROGATE, {}), QueueNotFound),
    "peek's state": (lambda: djqueue.peek("jobs", state=SURROGATE), InvalidMessage),
}


@pytest.mark.parametrize("case", SURROGATE_CASES)
def test_a_lone_surrogate_gets_djqueues_error(queues, case):
    call, expected = SURROGATE_CASES[case]
    with pytest.raises(expected):
        call()
    assert snapshot() == queues


@pytest.mark.parametrize("case", HUGE_CASES)
def test_an_int_too_long_to_write_gets_djqueues_error_naming_what_it_is(queues, case):
    call, expected = HUGE_CASES[case]
    with pytest.raises(expected) as info:
        call()
    assert "integer string conversion" not in str(info.value)
    assert snapshot() == queues


def test_extend_with_bad_seconds(queues):
    [message] = djqueue.receive("jobs")
    before = snapshot()
    with pytest.raises(InvalidMessage):
        message.extend(-3)
    assert snapshot() == before


@pytest.mark.parametrize("path", ["tests.handlers.missing", "no.such.module.func"])
def test_worker_refuses_to_start_with_an_unknown_handler_path(queues, path):
    with override_settings(DJQUEUE={"HANDLERS": {"jobs": path}}), \
            pytest.raises(CommandError, match="does not import"):
        call_command("djqueue_worker", "jobs", "--burst")
    assert snapshot() == queues


def test_worker_refuses_a_queue_without_handler(queues):
    with pytest.raises(CommandError, match="No handler for queue 'small'"):
        call_command("djqueue_worker", "small", "--burst")


def test_worker_refuses_unknown_queue(queues):
    with override_settings(DJQUEUE={"HANDLERS": {"ghost": "tests.handlers.record"}}), \
            pytest.raises(CommandError, match="Queue 'ghost' does not exist"):
        call_command("djqueue_worker", "ghost", "--burst")


def test_nul_characters_are_refused_in_keys_and_headers_and_escaped_in_errors():
    """PostgreSQL stores no NUL in text or JSON; the same refusal on every database, and a
    failure whose error text holds one is still recorded (the HTTP fuzz found the 500)."""
    djqueue.create_queue("nul", backoff=[0])
    before = snapshot()
    for options in ({"group_key": "a\x00b"}, {"dedup_key": "a\x00"},
                    {"headers": {"k": "\x00"}}, {"headers": {"a\x00": 1}}):
        with pytest.raises(InvalidMessage, match="NUL"):
            djqueue.send("nul", 1, **options)
    assert snapshot() == before
    djqueue.send("nul", {"text": "a\x00b"}, headers={"k": "\\u0000 is text"})  # both fine
    [message] = djqueue.receive("nul")
    message.nack(error="bad byte \x00 here")
    row = Message.objects.get(pk=message.pk)
    assert row.errors[-1]["error"] == "bad byte \\x00 here" and row.payload == {"text": "a\x00b"}


#: Reads by an id that no row can have. Each answers "not found" as it does for any
#: id it does not know, or refuses what is no id with djqueue's error, on every
#: database. Before: a result id holding a NUL was PostgreSQL's DataError, one holding
#: a lone surrogate the driver's UnicodeEncodeError; an int past 4,300 digits
#: Python's ValueError from str(); finished(), message_trace() and get_workflow()
#: given text Django's "expected a number" ValueError; a topic named by such an int,
#: Python's ValueError.
NO_SUCH_RESULT = ["a\x00b", SURROGATE, HUGE, None, 1.5]


@pytest.mark.parametrize("result_id", NO_SUCH_RESULT, ids=["nul", "surrogate", "huge", "none", "float"])
def test_a_task_result_id_no_record_can_have_is_not_found(queues, result_id):
    from djqueue.tasks.compat import TaskResultDoesNotExist, task_backends  # Django 5.2 too

    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result_id)
    if isinstance(result_id, str):
        assert djqueue.task_progress(result_id) is None
        assert djqueue.task_logs(result_id) == []


@pytest.mark.parametrize("message_id", ["12", "a\x00b", SURROGATE, 1.5, [1]], ids=repr)
@pytest.mark.parametrize("read", ["get_message", "finished", "message_trace"])
def test_a_message_read_given_no_int_says_so(queues, read, message_id):
    with pytest.raises(InvalidMessage, match=rf"^{read}\(\) takes a message id, not "):
        getattr(djqueue, read)(message_id)


@pytest.mark.parametrize("read", ["get_message", "finished"])
def test_a_message_read_given_an_int_no_row_can_have_finds_nothing(queues, read):
    assert getattr(djqueue, read)(HUGE) is None
    assert getattr(djqueue, read)(-(2**70)) is None


def test_a_workflow_id_that_is_no_int_or_past_64_bits(queues):
    from djqueue.exceptions import InvalidWorkflow
    from djqueue.models import Workflow

    with pytest.raises(InvalidWorkflow, match=r"^A workflow id is an int, not 'a\\x00b'"):
        djqueue.get_workflow("a\x00b")
    with pytest.raises(Workflow.DoesNotExist, match=r"^No workflow an integer of 16610 bits "):
        djqueue.get_workflow(HUGE)


def test_a_topic_named_by_no_string_is_a_type_error(queues):
    with pytest.raises(TypeError, match=r"^A topic is named by a string or given as a Topic, "
                                        "not int"):
        djqueue.group_lag(HUGE, "g")


def test_a_consumer_group_or_consumer_name_no_row_can_have(queues):
    """A group's or a consumer's name past 4,300 digits was Python's ValueError as its
    error was written; one with a lone surrogate, the driver's UnicodeEncodeError."""
    from djqueue.exceptions import TopicNotFound

    djqueue.create_topic("t6")
    djqueue.subscribe("t6", "g", mode="broadcast")
    with pytest.raises(ConfigurationError, match=r"^A group name is a string, not int"):
        djqueue.subscribe("t6", HUGE)
    for group in (SURROGATE, HUGE):
        with pytest.raises(TopicNotFound, match=r"^Topic 't6' has no consumer group "):
            djqueue.group_lag("t6", group)
        with pytest.raises(TopicNotFound):
            djqueue.group_queues("t6", group)
    assert djqueue.unregister_consumer("t6", "g", SURROGATE) == 0
    assert djqueue.unregister_consumer("t6", "g", HUGE) == 0
    assert snapshot() == queues
