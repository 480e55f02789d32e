"""The messages a worker has claimed and not yet settled.

Kept by the message object's identity: ids are per database, and the queues a
worker serves may live on several. Only the worker's loop thread changes it; the
heartbeat thread reads the held ids for the worker's row.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable

from django.db import DatabaseError

from djqueue.models import Message
from djqueue.storage.transitions import release

logger = logging.getLogger("djqueue.worker")


class HeldMessages:
    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._by_identity: dict[int, Message] = {}

    def __len__(self) -> int:
        return len(self._by_identity)

    def __bool__(self) -> bool:
        return bool(self._by_identity)

    def hold(self, messages: Iterable[Message]) -> None:
        by_identity = self._by_identity
        for message in messages:
            by_identity[id(message)] = message

    def forget(self, message: Message) -> None:
        self._by_identity.pop(id(message), None)

    def pks(self) -> list[int]:
        """The held messages' ids, for the worker's row (read from the heartbeat thread:
        a copy of the values first, so the loop thread may change the dict meanwhile)."""
        return [m.pk for m in list(self._by_identity.values())]

    def other_than(self, settled: Collection[Message]) -> list[Message]:
        """The held messages not among ``settled``: at shutdown, those still running."""
        keep = {id(m) for m in settled}
        return [m for key, m in self._by_identity.items() if key not in keep]

    def release(self, messages: list[Message]) -> int:
        """Put ``messages`` back in their queues for another worker, and forget them.
        Returns how many were released; a database error leaves them to their leases'
        expiry (logged, not raised: shutdown goes on)."""
        if not messages:
            return 0
        released = 0
        try:
            released = release(messages)
        except DatabaseError:
            logger.exception("Could not release %d message(s); their leases will expire",
                             len(messages), extra={"worker": self.worker_id})
        for message in messages:
            self.forget(message)
        return released
