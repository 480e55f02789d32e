"""Durations: what a number of seconds may be, wherever one enters djqueue.

Every duration is checked where it enters (the API, the admin's forms, settings,
command options) against the bounds below: finite, not negative (positive where
zero means nothing), and not absurd. A row written past these checks (by an old
version, or by hand) is read back clamped by :func:`clamp`, so one absurd value
cannot raise ``OverflowError`` in a worker or the reaper. A retry's delay from a
backoff schedule (:func:`stepped_delay`) is read so too.
"""

from __future__ import annotations

import math
import random
import traceback
from datetime import timedelta

from djqueue.exceptions import InvalidMessage, Postpone, RetryAfter, shown_value

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
YEAR = 365 * DAY

#: The longest lease a receive, a queue's visibility timeout or extend() grants
#: (SQS's visibility limit, 12 hours).
MAX_LEASE = 12 * HOUR
#: The longest delay a send, a retry or a backoff step may ask for.
MAX_DELAY = 10 * YEAR
#: The longest a finished message, a topic's body or a dedup key may be kept.
MAX_RETENTION = 100 * YEAR
#: The longest pause of a process's loop (reaper interval, shutdown grace, time limit).
MAX_PROCESS_WAIT = DAY


def check(value: object, name: str, *, high: float, positive: bool = True) -> float:
    """``value`` as seconds, or ValueError naming ``name`` and what it must be."""
    low_text = "above 0" if positive else "at least 0"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number of seconds {low_text} and at most "
                         f"{high:g}, got {shown_value(value)}.")
    try:
        seconds = float(value)
    except OverflowError:  # an int past a float's range
        seconds = math.inf
    if not math.isfinite(seconds) or seconds > high or seconds < 0 or (
            positive and seconds == 0):
        raise ValueError(f"{name} must be a number of seconds {low_text} and at most "
                         f"{high:g}, got {shown_value(value)}.")
    return seconds


def clamp(value: object, *, high: float, default: float) -> float:
    """A stored duration as it may be used: ``default`` if it is not a finite number,
    else within [0, ``high``]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    return min(max(float(value), 0.0), high)


def validate_delay(delay: float | timedelta | None, what: str = "delay") -> float | None:
    """``delay`` in seconds (None stays None); InvalidMessage naming ``what`` (the
    argument's name: a send's ``timeout`` and a receive's ``wait`` are checked so too)
    unless it is 0 to MAX_DELAY seconds."""
    if delay is None:
        return None
    if isinstance(delay, timedelta):
        delay = delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise InvalidMessage(f"{what} must be seconds or a timedelta, got {shown_value(delay)}.")
    if not 0 <= delay <= MAX_DELAY:  # also refuses NaN and infinity
        raise InvalidMessage(f"{what} must be 0 to {MAX_DELAY:g} seconds, "
                             f"got {shown_value(delay)}.")
    return float(delay)


def asked_delay(asked: Postpone | RetryAfter) -> tuple[float | None, str | None]:
    """The delay a handler's Postpone or RetryAfter asks for, checked: ``(seconds,
    None)``, or ``(None, error)`` when it is out of bounds, and the delivery is then to
    fail with that error on the queue's backoff (a handler's mistake is not lost)."""
    try:
        return validate_delay(asked.delay), None
    except InvalidMessage as bad:
        return None, (f"{type(asked).__name__} asked for an invalid delay: {bad}\n"
                      + "".join(traceback.format_exception(asked)))


def stepped_delay(steps: object, attempt: int, jitter: object) -> timedelta:
    """The delay before the retry that follows failure number ``attempt`` (1-based) of a
    backoff schedule ``steps`` (the last step repeats), lengthened by up to ``jitter`` of
    it at random: a queue's, or a task's own. Stored values are read clamped."""
    steps = steps if isinstance(steps, list | tuple) and steps else [0]
    step = clamp(steps[min(max(attempt, 1), len(steps)) - 1], high=MAX_DELAY, default=0.0)
    fraction = clamp(jitter, high=1.0, default=0.0)
    return timedelta(seconds=min(step * (1 + fraction * random.random()), MAX_DELAY))
