"""djqueue's exceptions: one hierarchy, each class documents when it is raised."""

from __future__ import annotations


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


class UnprocessableMessage(DjqueueError):
    """Raised by a handler: this message can never be processed (a forged or malformed
    one, say). The worker dead-letters it at once with this error, without retries."""


class UntrustedTask(UnprocessableMessage):
    """A task message names no task of a djqueue backend serving its queue, or a record
    that is not its own: it is dead-lettered, and nothing it names is imported or run."""


class HandlerNotFound(ConfigurationError):
    """A handler's dotted path does not import, or no handler is registered for a queue."""


class TaskTimeout(DjqueueError, TimeoutError):
    """A django.tasks task ran past its ``timeout``."""


class TaskCancelled(DjqueueError):
    """A django.tasks task was cancelled."""


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
