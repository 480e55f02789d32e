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


class Pace:
    def __init__(self) -> None:
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
