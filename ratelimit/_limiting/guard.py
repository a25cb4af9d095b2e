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

Windows default to :data:`DEFAULT_GUARD` on real time: it costs them ``g / (window +
g)`` of their rate, about 5% of a one-second window's and 0.08% of a minute's. Buckets
default to no
guard, since it would come out of a capacity (or a spacing) the user chose as a count;
``ratelimit size`` builds the margin into the sizes it recommends instead. On an
injected clock no request ever leaves late, so the default there is 0.
"""

from __future__ import annotations

import math
from datetime import timedelta

from .._clock import Clock, SystemClock
from .._validate import MAX_HORIZON, real

__all__ = ["DEFAULT_GUARD", "guard_seconds"]

#: Seconds. Measured with ``benchmarks/jitter.py`` on the development machine (2
#: shared cores, real Redis on loopback): 4 processes x 4 threads saturating one
#: token bucket at 200-400/s, lateness = when ``acquire()`` returned minus the
#: planned grant (``time.monotonic()`` before the call + the wait it returned, so the
#: Redis round trip is included), 2,000-4,000 samples per run, 10-15 s each, quiet
#: and with one CPU-burning process per core. Five runs, in ms:
#:
#:   quiet   p50 0.6-0.8   p99 1.2-14   p99.9 7-35    max 13-36
#:   loaded  p50 0.5-1.5   p99 4.6-20   p99.9 17-35   max 20-49
#:
#: (A sixth, taken while a test suite ran beside it, reached a loaded p99.9 of 79.)
#: Measured on arrival at a loopback HTTP server in its own process (``--http``), the
#: loaded p99.9 was 28 ms on a calm box, 70-95 ms while other test suites shared it.
#: 0.05 is the round figure above every loaded p99.9 of the first kind; the strict-
#: provider end-to-end tests (``tests/cli/test_strict_provider.py``) draw no 429 with it
#: at the issue's load, but did draw a few when three such loads ran at once. The
#: figures move by a factor of two between runs on this shared box: measure on the
#: machines that will send, and pass ``guard=`` (``ratelimit size --guard``) to match.
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
