"""How a long-running process logs a failure that repeats, so that an outage of the
database does not bury the log.

Before, a worker whose database did not answer logged a traceback of about 40 lines
for every failed claim, queue lookup and heartbeat, several a second (the count is
on docs/observability.md). Now each repeating piece of work (a claim on one
database, a heartbeat on one database, a reaper's pass over one) logs its failures
as a streak:

- the first failure at ERROR, with its traceback, as before;
- while the streak goes on, one ERROR line at most every ``REPEAT_EVERY`` seconds: how
  long it has lasted, how many failures, and the last one's error in a line;
- when the work succeeds again, one WARNING line: after how long and how many failures.

Celery's one line a retry while its broker is away ("Trying again in 2.00 seconds")
is the model, here at one line every ``REPEAT_EVERY`` seconds rather than one a try,
since djqueue's tries come several a second.
"""

from __future__ import annotations

import logging
import time
from typing import Any

#: Seconds between the lines of a streak after its first.
REPEAT_EVERY = 10.0


class FailureStreak:
    """The failures of one repeating piece of work, named ``what`` in the log ("Claim on
    database default"); ``extra``: the fields its records carry for a structured log
    handler (the worker, the database). Used from one thread."""

    def __init__(self, logger: logging.Logger, what: str,
                 extra: dict[str, Any] | None = None) -> None:
        self.logger, self.what, self.extra = logger, what, extra or {}
        self.failures = 0
        self._since = self._said_at = 0.0

    def failed(self, exc: BaseException, then: str) -> None:
        """Log a failure (``then``: what the process does next, "leaving it for 0.5 s")."""
        now = time.monotonic()
        self.failures += 1
        if self.failures == 1:
            self._since = self._said_at = now
            self.logger.error("%s failed; %s", self.what, then, exc_info=exc,
                              extra=self.extra)
        elif now - self._said_at >= REPEAT_EVERY:
            self._said_at = now
            self.logger.error("%s still failing after %.0f s (%s); %s: %s",
                              self.what, now - self._since, _failures(self.failures), then,
                              " ".join(str(exc).split())[:500] or type(exc).__name__,
                              extra=self.extra)

    def succeeded(self) -> None:
        """The work went through: a streak of failures ends, said once. (Called after
        every success: costs one test when there was no failure.)"""
        if self.failures:
            self.logger.warning("%s works again after %.1f s (%s)", self.what,
                                time.monotonic() - self._since, _failures(self.failures),
                                extra=self.extra)
            self.failures = 0


def _failures(count: int) -> str:
    return f"{count} failure{'s' if count != 1 else ''}"


class FailureStreaks(dict[str, FailureStreak]):
    """One streak a key (a database, a reaper's step), made at its first use: ``what``
    names the work with a ``{}`` for the key ("Claim on database {}"); its records carry
    ``extra``, and the key as ``key_field`` when one is named ("database")."""

    def __init__(self, logger: logging.Logger, what: str, extra: dict[str, Any] | None = None,
                 key_field: str | None = None) -> None:
        super().__init__()
        self.logger, self.what, self.extra, self.key_field = logger, what, extra, key_field

    def __missing__(self, key: str) -> FailureStreak:
        extra = {**(self.extra or {}), **({self.key_field: key} if self.key_field else {})}
        streak = self[key] = FailureStreak(self.logger, self.what.format(key), extra)
        return streak
