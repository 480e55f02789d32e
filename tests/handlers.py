"""Handlers the tests' worker processes run. Each leaves an Effect row per execution."""

import os
import random
import time

from djqueue.models import Message
from tests.models import Effect


def record(message: Message) -> None:
    Effect.objects.create(key=message.payload["n"], attempt=message.attempts, pid=os.getpid())


def slow_record(message: Message) -> None:
    """Marks its start (key -n), works ``sleep`` seconds on the first delivery, then records."""
    Effect.objects.create(key=-message.payload["n"], attempt=message.attempts, pid=os.getpid())
    if message.attempts == 1:
        time.sleep(message.payload.get("sleep", 0))
    record(message)


def exactly_once_record(message: Message) -> None:
    """Runs inside the ack transaction (queue t.exactly is exactly-once); dawdles around the
    insert so that kills land before, during and after it."""
    time.sleep(random.uniform(0, 0.01))
    record(message)
    time.sleep(random.uniform(0, 0.01))


def fail_then_succeed(message: Message) -> None:
    """Fails until the message carries ``failures`` recorded errors, then succeeds."""
    record(message)
    if len(message.errors or []) < message.payload["failures"]:
        raise ValueError(f"planned failure on attempt {message.attempts}")
