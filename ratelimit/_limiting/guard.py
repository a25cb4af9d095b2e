"""The margin against send jitter: how late a request may leave after its grant.

A limiter with ``guard = g`` keeps its promise for requests that leave up to ``g``
seconds after their grant (a loaded machine wakes sleepers late, unevenly) by making
each grant occupy ``g`` seconds more (``Algorithm.guarded``; what each algorithm keeps
back: docs/algorithms.md, "Send jitter and guard"). Windows default to
:data:`DEFAULT_GUARD` on real time; buckets to none, since it would come out of a
count the user chose (``ratelimit size`` builds it into its sizes instead); an
injected clock to 0, since nothing leaves late.
"""

from __future__ import annotations

import math
from datetime import timedelta

from .._clock import Clock, SystemClock
from .._validate import MAX_HORIZON, real

__all__ = ["DEFAULT_GUARD", "guard_seconds"]

#: Seconds: a round figure above the p99.9 lateness ``benchmarks/jitter.py`` measures
#: on a small loaded machine. Lateness depends on the machine: measure where requests
#: are sent, and pass ``guard=`` (``ratelimit size --guard``) to match.
DEFAULT_GUARD = 0.05


def guard_seconds(value: object, clock: Clock | None, default: float) -> float:
    """``guard`` as given (seconds or a ``timedelta``), or ``default`` on real time
    (``None``): seconds >= 0."""
    if value is None:
        return default if clock is None or isinstance(clock, SystemClock) else 0.0
    if isinstance(value, timedelta):
        value = value.total_seconds()
    result = real("guard", value)
    if not 0.0 <= result <= MAX_HORIZON or not math.isfinite(result):
        raise ValueError(f"guard must be seconds >= 0 and at most {MAX_HORIZON:g}, got {value!r}")
    return result
