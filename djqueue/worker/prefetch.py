"""How much a worker claims at a time, and how far ahead: enough to keep its handler
threads busy, no more.

**Claim size.** Each claim costs a round of statements and a commit, whatever it
takes, so with fast handlers small claims leave most of the speed unused (the
docs' performance page has the numbers). Large claims have their own cost: they
hold leases other workers could run, and one worker takes a whole burst. So unless
``--batch-size`` fixes it, the size adapts, by these rules:

- the first claim asks for :data:`FIRST` messages;
- a claim that came back full doubles the size, up to :data:`LARGEST` (a backlog:
  draining it fast is what counts);
- a claim that came back short sets the size to twice what it got, at least
  :data:`SMALLEST` (an idle or trickling queue: nothing is gained by asking for more
  than is there, and a burst reaching several idle workers is shared among them);
- a claim never asks for more than :data:`CLAIM_SECONDS` of handler work for the
  worker's threads, from the moving average of a handler run (slow handlers: small
  claims, so what one worker cannot start soon stays for the others).

**Prefetch.** If the worker claimed only once its handlers had nothing queued,
they would sit idle for a claim's round trip every batch (with fast handlers, a
third of the time). So the loop claims the next batch early when the work already
queued would run out within two claims; with slow handlers that is never.
"""

from __future__ import annotations

#: Weight of the newest sample in the moving averages.
ALPHA = 0.2
#: The adaptive claim size's first claim, and its largest.
FIRST = 10
LARGEST = 500
#: The least a claim asks for after a short one. Why 2, not 1: the worker claims again
#: at once after a full claim only (message_worker), and a claim of 1 that got 1 is
#: full, so a trickling queue cost an extra claim that found nothing for every message.
SMALLEST = 2
#: Seconds of handler work (per handler thread) one adaptive claim may ask for.
CLAIM_SECONDS = 0.2


class Prefetch:
    def __init__(self, concurrency: int, batch_size: int | None) -> None:
        """``batch_size`` None: the claim size adapts (see the module's docstring)."""
        self.concurrency = concurrency
        self.adaptive = batch_size is None
        #: The claim size by the backlog alone (fixed unless adaptive).
        self.size = FIRST if batch_size is None else batch_size
        #: Seconds one handler run takes, and one claim (moving averages; None until seen).
        self.handler: float | None = None
        self.claim: float | None = None

    def handled(self, seconds: float) -> None:
        """One handler run took ``seconds`` (called on handler threads: a lost update
        between two of them only skips a sample)."""
        self.handler = seconds if self.handler is None else (
            self.handler + ALPHA * (seconds - self.handler))

    @property
    def batch_size(self) -> int:
        """The messages the next claim asks for, at most."""
        if self.adaptive and self.handler:
            return max(1, min(self.size, int(self.concurrency * CLAIM_SECONDS / self.handler)))
        return self.size

    def claimed(self, seconds: float, asked: int, got: int) -> None:
        """A claim asked for ``asked`` messages, got ``got`` and took ``seconds``."""
        if got:
            self.claim = seconds if self.claim is None else (
                self.claim + ALPHA * (seconds - self.claim))
        if not self.adaptive:
            return
        if got < asked:
            self.size = max(SMALLEST, min(self.size, 2 * got))
        elif asked >= self.size:  # full, and not cut short by room or --max-messages
            self.size = min(LARGEST, 2 * self.size)

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
