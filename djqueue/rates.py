"""Rates ("50/s", "300/m", "1000/h"): how they are written, and the token bucket
arithmetic that enforces them.

A rate of N per period with a burst of B is a bucket of at most B tokens that
fills at N tokens a period; a message starts only by taking a token. Every
half-open window of one period therefore starts at most N + B - 1 messages:
the B in the bucket when it opens and N - 1 more refilled before it closes
(the N-th arrives as it closes). A burst of 1 spaces starts evenly, one every
period / N, and so no window of the period starts more than N.

The default burst is a tenth of a second's worth of the rate, at least 1 (5
for 50/s, 1 for 5/s or 300/m). Why not 1: a token that arrives while every
claimer is still on its way (asleep, or in another claim) waits in a bucket
that is full at 1, and that time is lost for good; measured with three
worker processes at 50/s, a burst of 1 drained 1,000 messages at 41/s. A
small bucket lets the next claim catch up.

The arithmetic here is pure; the rows the bucket lives in, and the locks that
make it exact across processes, are djqueue.storage.claim_limits' (a queue's)
and djqueue.storage.key_rate_claims' (a key's). ``LimitWait`` carries what a
claim learnt of the soonest token to the worker's sleep.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from djqueue.durations import DAY, HOUR, MINUTE
from djqueue.exceptions import shown_value

#: The largest count or burst a rate may name (a million starts a second is far past
#: what any one database claims; a larger number is a typing error).
MAX_COUNT = 1_000_000
_PERIODS = {"s": 1.0, "m": MINUTE, "h": HOUR, "d": DAY}
_RATE_RE = re.compile(r"^\s*([0-9]{1,7})\s*/\s*([0-9]{0,5})\s*([smhd])\s*\Z")


class Rate(NamedTuple):
    """``count`` starts every ``period`` seconds."""

    count: int  # type: ignore[assignment]  # a field's name, over tuple.count
    period: float

    @property
    def per_second(self) -> float:
        return self.count / self.period

    def __str__(self) -> str:
        """The canonical text: the largest unit that divides the period."""
        for unit in ("d", "h", "m", "s"):
            multiple = self.period / _PERIODS[unit]
            if multiple == int(multiple):
                return f"{self.count}/{'' if multiple == 1 else int(multiple)}{unit}"
        return f"{self.count}/{self.period:g}s"


def parse_rate(text: object) -> Rate:
    """``"50/s"``, ``"300/m"``, ``"1000/h"``, ``"20000/d"``, or with a multiple of the
    unit (``"10/5s"``, ``"100/15m"``). ValueError says what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"A rate is a string such as '50/s' or '300/m', not {text!r}.")
    match = _RATE_RE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a rate: write N/s, N/m, N/h or N/d "
                         "(or N/<k><unit>, such as 10/5s).")
    count, multiple, unit = int(match[1]), int(match[2] or 1), match[3]
    if count > MAX_COUNT:
        raise ValueError(f"A rate counts at most {MAX_COUNT:,} starts a period, got {count}.")
    if multiple == 0:
        raise ValueError(f"{text!r} is not a rate: its period must be longer than 0.")
    return Rate(count, multiple * _PERIODS[unit])


def check_burst(value: object) -> int:
    """A burst: a whole number of tokens from 1 to MAX_COUNT."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise ValueError(f"A burst is a whole number from 1 to {MAX_COUNT:,}, got {shown_value(value)}.")
    return value


#: The default burst holds this many seconds of the rate.
DEFAULT_BURST_SECONDS = 0.1


def default_burst(rate: Rate | None) -> int:
    """A tenth of a second's worth of ``rate``, at least 1 (see the module docstring)."""
    if rate is None:
        return 1
    return max(1, min(MAX_COUNT, math.floor(rate.per_second * DEFAULT_BURST_SECONDS)))


class Bucket(NamedTuple):
    """A token bucket as stored: ``tokens`` as of ``at`` (seconds on the database's clock)."""

    tokens: float
    at: float


def refilled(bucket: Bucket, rate: Rate, burst: int, now: float) -> Bucket:
    """The bucket at ``now``: filled for the time since ``at``, never past ``burst``.

    A clock reading older than ``at`` (two database servers, or a clock stepped
    back) adds nothing and does not move ``at`` back, so no token is counted twice.
    """
    if not math.isfinite(bucket.tokens) or not math.isfinite(bucket.at):
        return Bucket(float(burst), now)  # a row written by hand: start full
    elapsed = max(0.0, now - bucket.at)
    tokens = min(float(burst), max(0.0, bucket.tokens) + elapsed * rate.per_second)
    return Bucket(tokens, max(now, bucket.at))


def whole_tokens(bucket: Bucket) -> int:
    """How many messages the bucket lets start now."""
    return math.floor(bucket.tokens + 1e-9)


def seconds_to_next_token(bucket: Bucket, rate: Rate) -> float:
    """How long until the bucket holds a whole token again (0 if it does)."""
    missing = 1.0 - bucket.tokens
    if missing <= 1e-9:
        return 0.0
    if rate.count == 0:
        return math.inf
    return missing / rate.per_second


class LimitWait:
    """What a claim learnt of its queues' limits: the soonest one may let more start.

    A worker whose claim came up short sleeps no longer than this, so a rate
    limit is used to the full without polling faster than its tokens arrive.
    """

    def __init__(self) -> None:
        self.seconds: float | None = None

    def clear(self) -> None:
        self.seconds = None

    def note(self, seconds: float) -> None:
        if math.isfinite(seconds) and (self.seconds is None or seconds < self.seconds):
            self.seconds = max(0.0, seconds)
