"""djqueue's exceptions: one hierarchy, each class documents when it is raised."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any


class DjqueueError(Exception):
    """Base class of every djqueue error."""


class ConfigurationError(DjqueueError):
    """The DJQUEUE setting or a queue's options are invalid."""


class QueueNotFound(DjqueueError, LookupError):
    """No queue with that name exists."""

    def __init__(self, name: str, message: str | None = None) -> None:
        super().__init__(message or
                         f"Queue {name!r} does not exist. Create it with djqueue.create_queue().")
        self.name = name


class TopicNotFound(QueueNotFound):
    """No topic, or no consumer group of a topic, with that name exists."""


class InvalidMessage(DjqueueError, ValueError):
    """The payload, headers, delay or priority of a message is not acceptable."""


class PayloadTooLarge(InvalidMessage):
    """The encoded payload is larger than the queue's ``max_payload_bytes``."""


class QueueFull(DjqueueError):
    """The queue holds ``max_depth`` pending messages already."""


class PartitionUnavailable(DjqueueError):
    """A partitioned queue's partition cannot take the message: its database does not
    answer (a keyed message must go to its key's partition, and waits for no other), or
    no partition answers at all."""


class NotOwner(DjqueueError):
    """The message is no longer claimed by this receiver (its lease expired or was released).

    Acking or extending it is refused so that a late owner cannot finish a message
    that was already handed to someone else.
    """

    #: Members the HTTP API adds to its problem document (which receipts were done).
    extra: dict[str, object]


class UnprocessableMessage(DjqueueError):
    """Raised by a handler: this message can never be processed (a forged or malformed
    one, say). The worker dead-letters it at once with this error, without retries."""


class Postpone(DjqueueError):
    """Raised by a handler, a task or a ``consume()`` block: not now. The message goes
    back, to be delivered again after ``delay`` seconds (or a timedelta). This delivery
    does not count as an attempt and no error is recorded, so a message postponed every
    time is never dead-lettered: the handler decides when to stop (Oban's snooze). For
    a rate-limited service's "retry after", say, which is no failure of the message.
    A ``delay`` out of bounds fails the delivery instead, with that error."""

    def __init__(self, delay: float | timedelta, reason: str = "") -> None:
        self.delay = delay
        super().__init__(reason or f"postponed for {_seconds(delay)} s")


class RetryAfter(DjqueueError):
    """Raised by a handler, a task or a ``consume()`` block: this attempt failed; retry
    it after ``delay`` seconds (or a timedelta) instead of after the queue's backoff
    step (Celery's ``retry(countdown=...)``). It is a failure like any other: the
    error (this exception, with the one it was raised from) is recorded, the attempt
    counts, and at ``max_attempts`` the message is dead-lettered (a task: FAILED).
    ``delay=None`` keeps the backoff. A task retries on it whatever its ``retry_on``.
    A ``delay`` out of bounds fails the delivery with that error, on the backoff."""

    def __init__(self, delay: float | timedelta | None, reason: str = "") -> None:
        self.delay = delay
        super().__init__(reason or ("retry after the queue's backoff" if delay is None
                                    else f"retry after {_seconds(delay)} s"))


def _seconds(delay: object) -> object:
    """A delay as written in a message: a timedelta in seconds, an int as shown_value
    writes it (one past 4,300 digits broke the exception's own making), anything else
    as given (the worker says what is wrong with it)."""
    if isinstance(delay, timedelta):
        return f"{delay.total_seconds():g}"
    return shown_value(delay) if isinstance(delay, int) else delay


class BatchFailures(DjqueueError):
    """Raised by a batch handler (``@handler(queue, batch=N)``) when some of its messages
    failed and the rest are done (SQS's partial batch response). ``failures`` maps each
    failed message (or its id) to what came of it: an exception, as a handler of one
    message would raise it (``RetryAfter``, ``Postpone`` and ``UnprocessableMessage``
    keep their meaning), or a text, recorded as the delivery's error. The messages it
    does not name are acked. Naming a message that is not in the batch fails the whole
    batch, so that a mistake never acks a message by chance."""

    def __init__(self, failures: Mapping[Any, BaseException | str]) -> None:
        self.failures = dict(failures)
        super().__init__(f"{len(self.failures)} message(s) of the batch failed")


class UntrustedTask(UnprocessableMessage):
    """A task message names no task of a djqueue backend serving its queue, or a record
    that is not its own: it is dead-lettered, and nothing it names is imported or run."""


class HandlerNotFound(ConfigurationError):
    """A handler's dotted path does not import, or no handler is registered for a queue."""


class TaskTimeout(DjqueueError, TimeoutError):
    """A django.tasks task ran past its ``timeout``."""


class TaskCancelled(DjqueueError):
    """A django.tasks task was cancelled."""


class TaskDeadLettered(DjqueueError):
    """A django.tasks task's message was dead-lettered before a run of the task ended
    it: its workers died on every attempt (the reaper returned its lease each time), or
    its message could not be run. Its result reads FAILED with this error, which carries
    the message's last error; a redrive of the message makes it READY again."""

    @classmethod
    def of_message(cls, message_id: int, attempts: int,
                   errors: list[dict[str, Any]] | None) -> TaskDeadLettered:
        """The error for a message with these attempts and recorded errors, naming the
        last of them (a task's result and a workflow step's error both say it so)."""
        last = errors[-1].get("error") if errors else None
        deliveries = "1 delivery" if attempts == 1 else f"{attempts} deliveries"
        return cls(f"Its message {message_id} was dead-lettered after {deliveries}; "
                   f"the last error: {last or '(none recorded)'}")


class NotFinished(DjqueueError, TimeoutError):
    """A wait for a task's result or a workflow ended at its timeout before they
    finished (Celery's ``TimeoutError`` from ``AsyncResult.get``). The task or workflow
    goes on: wait again, or look later."""


class InvalidCondition(DjqueueError, ValueError):
    """A receive condition that does not parse, or that the database cannot evaluate."""

    def __init__(self, message: str, position: int, source: str) -> None:
        self.position = position
        self.source = source
        shown = f": {source!r}" if source else ""
        super().__init__(f"{message} at position {position}{shown}")


class InvalidProgress(DjqueueError, ValueError):
    """A progress report that is not a fraction from 0 to 1 with a short text note."""


class InvalidWorkflow(DjqueueError, ValueError):
    """A workflow that cannot run as composed: not a task, a step used twice, a cycle."""


class WorkflowBusy(DjqueueError):
    """The workflow is not in a state that allows this (retry while steps still run)."""


def given_id(value: object, error: type[Exception], takes: str) -> int:
    """``value``, an id a caller gave, if it is an int (not a bool); ``error`` otherwise,
    saying ``takes`` and what it was given ("finished() takes a message id, not 'a'.").
    An int past 64 bits is returned: it finds no row (Django compares it so)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{takes}, not {shown_value(value)}.")
    return value


def shown_value(value: object, longest: int = 100) -> str:
    """``value`` as an error message shows what it was given: its repr, cut to
    ``longest`` characters.

    Why not ``{value!r}``: Python refuses to write an int of more than 4,300 digits as
    text (a ValueError), so the message meant for ``send(priority=10**5000)`` failed to
    be made and the caller got that error instead; and a repr of a huge value made a
    huge message. Such an int shows its size; a value whose repr fails, its type."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a container holding such an int, or a repr that raises
        return f"a {type(value).__name__}"
    return text if len(text) <= longest else f"{text[:longest - 3]}..."
