"""Durations: what a number of seconds may be, wherever one enters djqueue.

Every duration is checked where it enters (the API, the admin's forms, settings,
command options) against the bounds below: finite, not negative (positive where
zero means nothing), and not absurd. A row written past these checks (by an old
version, or by hand) is read back clamped by :func:`clamp`, so one absurd value
cannot raise ``OverflowError`` in a worker or the reaper.
"""

from __future__ import annotations

import math

from djqueue.exceptions import shown_value

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
