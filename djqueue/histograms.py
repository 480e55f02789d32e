"""Log-bucketed histograms of durations, mergeable and small (a sparse dict).

Bucket 0 holds everything up to 1 ms; bucket ``i`` holds
``(1 ms · g^(i-1), 1 ms · g^i]`` with ``g = 1.1``, so a quantile read back is
within 10 % of the true value, and minutes merge into hours and days exactly.
Keys are strings because the dicts are stored as JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

FLOOR = 0.001
GROWTH = 1.1
_LOG_GROWTH = math.log(GROWTH)

Histogram = dict[str, int]


def bucket(seconds: float) -> int:
    if seconds <= FLOOR:
        return 0
    return 1 + math.floor(math.log(seconds / FLOOR) / _LOG_GROWTH - 1e-9)


def upper_bound(index: int) -> float:
    return FLOOR * GROWTH ** index


def of(values: Iterable[float]) -> Histogram:
    counts: Histogram = {}
    for value in values:
        key = str(bucket(value))
        counts[key] = counts.get(key, 0) + 1
    return counts


def merge(*histograms: Mapping[str, int]) -> Histogram:
    merged: Histogram = {}
    for hist in histograms:
        for key, count in hist.items():
            merged[key] = merged.get(key, 0) + count
    return merged


def total(hist: Mapping[str, int]) -> int:
    return sum(hist.values())


def quantile(hist: Mapping[str, int], q: float) -> float | None:
    """The upper bound of the bucket holding the ``q``-th quantile (None when empty)."""
    count = total(hist)
    if not count:
        return None
    rank = math.ceil(q * count)
    seen = 0
    for index in sorted(int(k) for k in hist):
        seen += hist[str(index)]
        if seen >= rank:
            return upper_bound(index)
    return upper_bound(max(int(k) for k in hist))
