"""The margin against send jitter: how late a request may leave after its grant.

A grant is decided for a moment ``at``; the request leaves when its caller wakes from
sleeping until then, which on a loaded machine is some milliseconds late, and the late
ones are not evenly spread: one batch leaves late, the next on time, and a provider
counting a strict window sees both in one. A limiter with ``guard = g`` keeps its
promise for requests that leave up to ``g`` seconds late, by making each grant occupy
``g`` seconds more than it would (``Algorithm.guarded``):

- a sliding window counts a grant for ``window + g``;
- a token bucket keeps ``g * refill_per_sec`` tokens of its capacity back;
- a leaky bucket spaces grants ``1 / leak_per_sec + g`` apart per token.

Windows default to :data:`DEFAULT_GUARD` on real time: it costs them ``g / window`` of
their rate, a fraction of a percent for a one-second window. Buckets default to no
guard, since it would come out of a capacity (or a spacing) the user chose as a count;
``ratelimit size`` builds the margin into the sizes it recommends instead. On an
injected clock no request ever leaves late, so the default there is 0.
"""

from __future__ import annotations

import math

from ._clock import Clock, SystemClock
from ._validate import MAX_HORIZON, real

__all__ = ["DEFAULT_GUARD", "guard_seconds"]

#: Seconds. Provisional: to be replaced by the send lateness measured on this machine.
DEFAULT_GUARD = 0.02


def guard_seconds(value: object, clock: Clock | None, default: float) -> float:
    """``guard`` as given, or ``default`` on real time (``None``): seconds >= 0."""
    if value is None:
        return default if clock is None or isinstance(clock, SystemClock) else 0.0
    result = real("guard", value)
    if not 0.0 <= result <= MAX_HORIZON or not math.isfinite(result):
        raise ValueError(f"guard must be seconds >= 0 and at most {MAX_HORIZON:g}, got {value!r}")
    return result
