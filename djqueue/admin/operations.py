"""Operations on a queue, shared by the dashboard's buttons and the queue list's actions.

Each calls the API and refreshes the queue's depth snapshot, so the counts
shown next are the counts after the operation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from djqueue.admin import permissions
from djqueue.api import queue_operations, queues
from djqueue.models import Queue
from djqueue.monitoring import rollups


@dataclass(frozen=True)
class QueueOperation:
    name: str
    label: str
    permission: str
    #: The ``has_<name>_permission`` method admin actions check (see OperationPermissions).
    admin_permission: str
    #: Destructive operations show a confirmation page first.
    question: str | None
    run: Callable[[Queue], str]

    def __call__(self, queue: Queue) -> str:
        done = self.run(queue)
        # Redriven messages land in the queues this one is the dead-letter queue of.
        feeding = Queue.objects.filter(dead_letter_queue=queue).values_list("pk", flat=True)
        rollups.sample_depth([queue.pk, *feeding])
        return done


def _pause(queue: Queue) -> str:
    queues.pause(queue)
    return f"Paused {queue.name}."


def _resume(queue: Queue) -> str:
    queues.resume(queue)
    return f"Resumed {queue.name}."


def _purge(queue: Queue) -> str:
    return f"Purged {queue_operations.purge(queue)} message(s) from {queue.name}."


def _redrive(queue: Queue) -> str:
    return f"Redrove {queue_operations.redrive(queue)} dead-lettered message(s) of {queue.name}."


QUEUE_OPERATIONS = {op.name: op for op in [
    QueueOperation("pause", "Pause", permissions.PAUSE, "pause", None, _pause),
    QueueOperation("resume", "Resume", permissions.PAUSE, "pause", None, _resume),
    QueueOperation(
        "purge", "Purge", permissions.PURGE, "purge",
        "Delete every ready, delayed, waiting and dead message of these queues? Messages in "
        "flight finish normally. Purged messages are gone: they are not kept in history.",
        _purge),
    QueueOperation(
        "redrive", "Redrive dead letters", permissions.REDRIVE, "redrive",
        "Move every dead-lettered message of these queues back to the queue it failed in, "
        "ready, with a fresh attempt count?", _redrive),
]}
