"""Handlers the tests' worker processes run. Each leaves an Effect row per execution."""

import gc
import logging
import os
import random
import threading
import time
from pathlib import Path

from djqueue.exceptions import BatchFailures, Postpone, RetryAfter
from djqueue.models import Message
from djqueue.worker.registry import handler
from tests.models import Effect, Run


def record(message: Message) -> None:
    Effect.objects.create(key=message.payload["n"], attempt=message.attempts, pid=os.getpid())


def noop(message: Message) -> None:
    """Does nothing (the adaptive claim size's test: no handler time to bound a claim)."""


def garbage_collection(message: Message) -> None:
    """Records the collector's settings in the worker process: ``key`` the message's n,
    ``attempt`` the young generation's threshold, ``pid`` how many objects are frozen."""
    Effect.objects.create(key=message.payload["n"], attempt=gc.get_threshold()[0],
                          pid=gc.get_freeze_count())


def partition_record(message: Message) -> None:
    """The partition tests' handler (an exactly-once queue): its effect is written on the
    message's own database, in the transaction that acks it."""
    Effect.objects.using(message._state.db).create(
        key=message.payload["n"], attempt=message.attempts, pid=os.getpid())


def slow_record(message: Message) -> None:
    """Marks its start (key -n), works ``sleep`` seconds on the first delivery, then records."""
    Effect.objects.create(key=-message.payload["n"], attempt=message.attempts, pid=os.getpid())
    if message.attempts == 1:  # not time.sleep: under libfaketime it fails (EINVAL)
        threading.Event().wait(message.payload.get("sleep", 0))
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


def asks_later(message: Message) -> None:
    """Records each run. Postpones (``postpone`` s) until it has run ``postpones`` times,
    then fails with RetryAfter(``retry_after``) from a ConnectionError while it has
    fewer than ``failures`` recorded errors, then succeeds."""
    record(message)
    payload = message.payload
    if Effect.objects.filter(key=payload["n"]).count() <= payload.get("postpones", 0):
        raise Postpone(payload["postpone"])
    if len(message.errors or []) < payload.get("failures", 0):
        try:
            raise ConnectionError("the service answered 503")
        except ConnectionError as exc:
            raise RetryAfter(payload["retry_after"]) from exc


#: Text no database stores as it is: PostgreSQL reads no NUL, no driver encodes a lone
#: surrogate (a str Python holds, as a decoding with "surrogateescape" makes).
UNSTORABLE_ERROR = "a NUL \x00 and a lone surrogate \udcff in one error"


def poison(message: Message) -> None:
    """Fault tests' poison messages: ``kind`` crash, hang, memory or unstorable (an error
    text holding a NUL and a lone surrogate); anything else works."""
    kind = message.payload.get("kind")
    if kind == "crash":
        raise RuntimeError(f"poison message {message.payload['n']} crashed its handler")
    if kind == "unstorable":
        raise RuntimeError(UNSTORABLE_ERROR)
    if kind == "hang":
        time.sleep(3600)
    if kind == "memory":
        hoard = []
        while True:  # until the worker's --max-memory turns this into a MemoryError
            hoard.append(bytearray(64 * 1024 * 1024))
    record(message)


#: What leaking() keeps: gone only with its process.
_kept: list[bytes] = []


def leaking(message: Message) -> None:
    """Keeps ``mb`` MB written (so resident) for as long as its process lives, as a
    handler caching without bound would, then works ``sleep`` seconds; records an
    effect with the process's pid."""
    _kept.append(b"x" * (message.payload["mb"] << 20))
    threading.Event().wait(message.payload.get("sleep", 0))
    record(message)


def lease_test(message: Message) -> None:
    """First delivery: with ``extend``, works ``work`` seconds extending the lease every
    0.3 s; without it, works until the message has been redelivered and the second
    delivery has finished (so its own ack comes late, whatever the machine's load).
    Records an effect when done, so a redelivered message records two."""
    if message.attempts == 1:
        deadline = time.monotonic() + message.payload["work"]
        if message.payload["extend"]:
            while time.monotonic() < deadline:
                time.sleep(0.3)
                message.extend(2)
        else:
            redelivered = Effect.objects.filter(key=message.payload["n"], attempt__gte=2)
            while not redelivered.exists() and time.monotonic() < deadline + 60:
                time.sleep(0.2)
    record(message)


def timed_run(message: Message) -> None:
    """Works ``sleep`` seconds (on the first delivery only if ``first_only``) and records
    its start and finish (a Run row)."""
    started = time.time()
    payload = message.payload
    if message.attempts == 1 or not payload.get("first_only"):
        time.sleep(payload.get("sleep", 0))
    Run.objects.create(key=payload["n"], group=message.group_key or "", started=started,
                       finished=time.time(), pid=os.getpid())


def reporting(message: Message) -> None:
    """Logs, reports 40 %, then waits until the file ``hold`` exists (the test creates it
    once it has seen the progress); fails on the attempts listed in ``fail_on``."""
    log = logging.getLogger("tests.reporting")
    payload = message.payload
    log.info("resizing image %s", payload["n"])
    message.progress(0.4, "resized 40 of 100")
    hold = Path(payload["hold"])
    deadline = time.monotonic() + 60
    while not hold.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    log.warning("the thumbnail of %s is blurry", payload["n"])
    if message.attempts in payload.get("fail_on", ()):
        try:
            raise OSError(f"disk full on attempt {message.attempts}")
        except OSError:
            log.exception("could not save image %s", payload["n"])
            raise
    logging.getLogger("tests.quiet").debug("below the kept level")
    message.progress(1.0, "done")
    log.info("saved image %s", payload["n"])


@handler("t.batched", batch=50)
def record_batch(messages: list[Message]) -> None:
    """A batch handler: an Effect row a message, ``attempt`` the size of its run. A
    payload's ``fail`` names it in a BatchFailures; ``raise`` raises for the whole run
    (``"retry"``: RetryAfter(60), ``"stranger"``: a BatchFailures naming no message of
    the run); ``sleep`` holds the run that many seconds first; ``log`` logs a warning
    naming the run's size (a number: that many records, the others at INFO)."""
    time.sleep(max((m.payload.get("sleep", 0) for m in messages), default=0))
    records = max(int(m.payload.get("log", 0)) for m in messages)
    if records:
        logging.getLogger("tests.reporting").warning("a run of %d", len(messages))
    for n in range(1, records):
        logging.getLogger("tests.reporting").info("record %d", n)
    Effect.objects.bulk_create([Effect(key=m.payload["n"], attempt=len(messages),
                                       pid=os.getpid()) for m in messages])
    raises = {m.payload.get("raise") for m in messages}
    if "retry" in raises:
        raise RetryAfter(60, "the service asked for a minute")
    if "stranger" in raises:
        raise BatchFailures({-1: "no such message"})
    failed = {m: f"refused {m.payload['n']}" for m in messages if m.payload.get("fail")}
    if failed:
        raise BatchFailures(failed)


@handler("t.abatched", batch=10)
async def record_batch_async(messages: list[Message]) -> None:
    """An async batch handler: an Effect row a message, ``attempt`` the run's size."""
    await Effect.objects.abulk_create([Effect(key=m.payload["n"], attempt=len(messages))
                                       for m in messages])


@handler("t.windowed", batch=20, batch_wait=4)
def record_windowed(messages: list[Message]) -> None:
    """A batch handler with a window of 4 s: an Effect row a message, ``attempt`` the
    run's size."""
    Effect.objects.bulk_create([Effect(key=m.payload["n"], attempt=len(messages),
                                       pid=os.getpid()) for m in messages])


@handler("t.async")
async def record_async(message: Message) -> None:
    """An async handler: an Effect row through the async ORM, ``attempt`` its delivery and
    ``pid`` the thread that ran the write's SQL (threading.get_ident, cut to 31 bits);
    ``log`` logs a warning; ``fail`` raises after the write."""
    await Effect.objects.acreate(key=message.payload["n"], attempt=message.attempts,
                                 pid=await _sql_thread())
    if message.payload.get("log"):
        logging.getLogger("tests.reporting").warning("async run of %s", message.payload["n"])
    if message.payload.get("fail"):
        raise ValueError(f"refused {message.payload['n']} after its write")


@handler("t.aexactly", exactly_once=True)
async def record_async_exactly_once(message: Message) -> None:
    """record_async on an exactly-once handler: the write commits with the ack, or not."""
    await record_async(message)


async def _sql_thread() -> int:
    from asgiref.sync import sync_to_async
    return await sync_to_async(lambda: threading.get_ident() % 2**31, thread_sensitive=True)()
