"""The statistics ``ratelimit bench`` reports, as pure functions of what it recorded."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

__all__ = ["allowed", "jain", "most_in_window", "percentile", "timeline"]


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def jain(shares: Sequence[float]) -> float:
    """Jain's fairness index: 1 when every worker got the same, ``1/n`` when one got all.

    ``(sum x)^2 / (n * sum x^2)``; 1 for no shares or nothing granted (nobody was
    treated worse than anybody else).
    """
    squares = sum(x * x for x in shares)
    if not shares or squares == 0:
        return 1.0
    return sum(shares) ** 2 / (len(shares) * squares)


def most_in_window(times: Sequence[float], window: float) -> int:
    """The most of ``times`` (sorted) in any half-open interval ``[t, t + window)``."""
    most = 0
    for i, t in enumerate(times):
        most = max(most, bisect.bisect_left(times, t + window, lo=i) - i)
    return most


def timeline(times: Sequence[float], start: float, seconds: float, width: float) -> list[float]:
    """Events per second in consecutive bins of ``width`` seconds from ``start``."""
    bins = [0] * max(1, math.ceil(seconds / width - 1e-9))
    for t in times:
        index = math.floor((t - start) / width)
        if 0 <= index < len(bins):
            bins[index] += 1
    return [count / width for count in bins]


def allowed(algorithm: str, first: float, second: float, seconds: float) -> float:
    """How many grants a perfect limiter allows in ``seconds`` from a fresh start.

    ``first, second``: capacity and refill (token bucket), capacity and leak (leaky
    bucket: no burst, one grant at once then one per interval), limit and window
    (sliding window: a full window's worth at each window's start).
    """
    if algorithm == "token-bucket":
        return math.floor(first + second * seconds + 1e-9)
    if algorithm == "leaky-bucket":
        return math.floor(second * seconds + 1e-9) + 1
    return first * math.ceil(seconds / second - 1e-9)
