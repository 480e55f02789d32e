"""Handlers' ``in_claim_transaction`` hooks, called in the transaction that acks
finished messages and claims the next ones.

A hook sees the messages of the queues its handler serves; when one hook serves
all the worker's queues (the usual case, the django.tasks backend's), it is
called once with the batches as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from djqueue.models import Message
from djqueue.types import AckHook
from djqueue.worker.registry import Handler


class ClaimHooks:
    def __init__(self, handlers: Mapping[str, Handler], queue_names: Sequence[str]) -> None:
        self._everything = set(queue_names)
        #: Each hook, with the queues whose handler has it.
        self._hooks: dict[AckHook, set[str]] = {}
        for name, entry in handlers.items():
            if entry.in_claim_transaction is not None:
                self._hooks.setdefault(entry.in_claim_transaction, set()).add(name)

    def hook(self) -> AckHook | None:
        """What the claims and acks call, or None when no handler has a hook."""
        return self._call if self._hooks else None

    def _call(self, db: str, acks: Sequence[Message], acked: Sequence[Message]) -> None:
        for hook, names in self._hooks.items():
            if names >= self._everything:
                hook(db, acks, acked)
                continue
            hook(db, *([m for m in group if m.queue.name in names] for group in (acks, acked)))
