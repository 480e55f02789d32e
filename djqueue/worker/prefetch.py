"""How far ahead a worker claims: enough to keep its handler threads busy, no more.

A claim takes a round of statements and a commit. If the worker claimed only
once its handlers had nothing queued, they would sit idle for that long every
batch (with fast handlers, a third of the time). So the loop claims the next
batch early when the work already queued would run out within two claims;
with slow handlers that is never, and it holds no more leases than before.
"""

from __future__ import annotations

#: Weight of the newest sample in the moving averages.
ALPHA = 0.2


class Prefetch:
    def __init__(self, concurrency: int, batch_size: int) -> None:
        self.concurrency, self.batch_size = concurrency, batch_size
        #: Seconds one handler run takes, and one claim (moving averages; None until seen).
        self.handler: float | None = None
        self.claim: float | None = None

    def handled(self, seconds: float) -> None:
        """One handler run took ``seconds`` (called on handler threads: a lost update
        between two of them only skips a sample)."""
        self.handler = seconds if self.handler is None else (
            self.handler + ALPHA * (seconds - self.handler))

    def claimed(self, seconds: float) -> None:
        self.claim = seconds if self.claim is None else self.claim + ALPHA * (seconds - self.claim)

    def runs_dry(self, queued: int, concurrency: int) -> bool:
        """Would ``queued`` messages keep ``concurrency`` threads busy for less than two claims?"""
        if self.handler is None or self.claim is None:
            return False
        return queued * self.handler < 2 * self.claim * concurrency

    def most_held(self, outstanding: int) -> int:
        """Messages the worker may hold unfinished: a batch beyond its threads, and one
        batch more while what is queued would run out before the next claim returns."""
        concurrency, batch = self.concurrency, self.batch_size
        queued = max(0, outstanding - concurrency)
        return concurrency + batch * (2 if self.runs_dry(queued, concurrency) else 1)

    def finished_awaited(self, held: int, unflushed: int) -> int:
        """How many more finished messages give the loop something to do (of ``held``
        messages, ``unflushed`` finished and waiting for their ack): make room for a
        batch's claim, fill a batch of acks, or finish everything held.

        Why: waking the loop for every finished message cost a thread switch and a
        pass of the loop each, while it had work only once a batch.
        """
        outstanding = held - unflushed
        batch = self.batch_size
        most = max(1, min(outstanding, batch - unflushed))
        for left in range(outstanding - 1, max(outstanding - most, 0), -1):
            if self.most_held(left) - left >= batch:
                return outstanding - left
        return most
