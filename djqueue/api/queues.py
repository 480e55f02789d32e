"""Managing queues: create, look up, pause and resume."""

from __future__ import annotations

from djqueue.models import Queue
from djqueue.storage import dialects, queue_lookup
from djqueue.storage.queue_lookup import QueueRef, create_queue, get_queue

__all__ = ["create_queue", "get_queue", "pause", "resume", "set_paused"]


def set_paused(ref: QueueRef, paused: bool) -> Queue:
    queue = get_queue(ref, fresh=True)
    Queue.objects.using(dialects.alias()).filter(pk=queue.pk).update(paused=paused)
    queue.paused = paused
    queue_lookup.forget(queue.name)
    return queue


def pause(ref: QueueRef) -> Queue:
    """Stop workers claiming from the queue; sends still succeed."""
    return set_paused(ref, True)


def resume(ref: QueueRef) -> Queue:
    return set_paused(ref, False)
