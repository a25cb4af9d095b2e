"""The limiters a provider's published limit calls for: the arithmetic, no I/O.

``ratelimit.for_limit`` builds the token bucket sized here, and ``ratelimit size``
(``ratelimit._cli.sizing``) prints all three, so that the library and the command
recommend the same numbers. Given "1,000 requests/min, burst 20", a headroom ``h``
(the fraction of the provider's rate deliberately left unused, so that network jitter,
clock steps and retries never push the provider over its limit) and a guard ``g`` (how
late a request may leave after its grant, see ``ratelimit._limiting.guard``), each
rule gives settings that keep the provider's limit for sends up to ``g`` late.

Notation: the provider allows ``L`` per window ``T`` (``rho = L / T``), or with a
documented burst ``B`` it is a token bucket of ``B`` refilled at ``rho``; ``r`` is
the recommended rate, ``rho (1 - h)`` unless a rule below cuts it. Every rule rests
on one fact: a request granted at ``a`` arrives at some ``a + d`` with ``0 <= d <=
g``, so the arrivals the provider sees in any interval of length ``D`` were granted
in an interval of length ``D + g``. A limiter that grants at most ``A(D)`` in any
interval of length ``D`` is therefore safe when ``A(D + g)`` stays within what the
provider allows in ``D``, for every ``D``. Counts are whole: ``A`` of a bucket is
``floor(C + r D)`` (a GCRA bucket of capacity ``C``: the ``k``-th grant in an
interval starting at ``x`` cannot come before ``x + (k - C) / r``), and ``fit(x) =
floor(x + 1e-6)`` counts a grant at each end of a span (the 1e-6 absorbs rounding
and the nanosecond early a store may grant).

- **token bucket**, no documented burst (the provider most likely counts per
  window): any provider window sees at most ``C + fit(r (T + g))`` arrivals, so
  ``capacity = L - fit(r (T + g))``: the headroom ``h L`` pays for the burst and, at
  ``r g`` tokens, for the guard; the time comes out of the headroom, not on top of
  it. If that leaves less than one token, the refill is cut to ``(L - 0.001) / (T +
  g)`` and the capacity is 1 (one token and the guard then just fit).
  With a burst ``B``: arrivals in ``D`` are at most ``C + r (D + g) = (C + r g) + r
  D``, within the provider's ``B + rho D`` for every ``D`` exactly when ``r <= rho``
  and ``C + r g <= B``. The headroom applies to the burst too (a bucket holding the
  provider's whole burst gains its margin only at ``h r`` tokens a second), and the
  guard comes out of that margin where it fits: ``capacity = floor(B - max(h B, r
  g))``. If that is below one token, ``capacity = 1`` and the refill is cut to the
  faster of ``(B - 1) / g`` (then ``1 + r g <= B``) and ``1 / (1 / rho + g)`` (grants
  that far apart arrive at least ``1 / rho`` apart, which any bucket of ``B >= 1`` at
  ``rho`` accepts).
  A burst no larger than ``L`` leaves both readings of the provider's words open:
  a bucket of ``B`` at ``rho``, or ``L`` in any window of ``T`` with bursts of at
  most ``B``. The bucket then keeps both: its capacity and refill are the smaller of
  the two rules' (each rule holds for any smaller capacity and rate, so their
  smaller values hold for both), and the capacity is computed again at the refill
  kept. A burst above ``L`` says itself that the provider lets more than ``L`` pass
  in a window: the burst's rule alone.
  The guard is folded into these numbers rather than passed as ``guard=``: the
  capacity printed is then the burst the bucket really grants, a whole number, and
  the recommendation means the same on any clock.
- **leaky bucket**: grants at least ``1 / r`` apart, so ``A(D) = 1 + fit(r D)``.
  Without a burst: ``1 + fit(r (T + g)) <= L``, i.e. ``leak_per_sec = min(rho (1 -
  h), (L - 0.001) / (T + g))``. With one: ``1 + r (D + g) <= B + rho D``, the
  bucket's rule with ``C = 1``: ``rho (1 - h)`` if ``1 + r g <= B``, else the same
  cut as the bucket's. Room (``capacity``) for one request per worker plus one: each worker blocks
  on its own acquire, so at most N wait at once, and the request granted last still
  occupies the bucket while it leaks (for ``1 / leak_per_sec``), when its worker may
  already be asking again. A smaller bucket overflows (``AcquireTimeout`` at once),
  a larger one only allows longer waits. The longest wait is ``N / leak_per_sec``.
- **sliding window**: without a documented burst, ``floor(L (1 - h))`` per the
  provider's window with ``guard=g``: the window counts each grant for ``T + g``, so
  the grants behind any provider window's arrivals are counted together. With a
  burst, a window as large as the provider's would let the whole allowance go at
  once, far beyond the burst; the window becomes ``C_w = max(1, floor(B (1 - h)))``
  per ``C_w / r`` seconds with ``guard=g``. Its grants in an interval of length ``D +
  g`` number at most ``C_w (k + 1)``, ``k = floor((D + g) / (C_w / r + g))``, and
  ``k >= 1`` only once ``D >= k C_w / r``; ``C_w (k + 1) <= B + rho k C_w / r`` holds
  for every ``k`` once ``C_w <= B`` and ``r <= rho``. So the guard costs the window
  rate (``C_w / (C_w / r + g)``), never burst. The window passes ``guard``
  explicitly: it is the window's own way of keeping the margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import _validate
from .._validate import Rate
from .guard import DEFAULT_GUARD, guard_seconds

__all__ = [
    "DEFAULT_HEADROOM",
    "LeakyBucketSize",
    "SlidingWindowSize",
    "TokenBucketSize",
    "leaky_bucket_size",
    "settings",
    "sliding_window_size",
    "token_bucket_size",
]

DEFAULT_HEADROOM = 0.05

# Tokens: what `fit` adds before flooring (see the module docstring), and how far
# below a whole count a cut rate stays so that `fit` cannot round it up.
_ROUNDING = 1e-6
_BELOW = 1e-3


def _fit(tokens: float) -> int:
    """Whole grants ``tokens`` of rate x span allow, counting one at each end."""
    return math.floor(tokens + _ROUNDING)


@dataclass(frozen=True)
class TokenBucketSize:
    capacity: float
    refill_per_sec: float
    #: Why this capacity: ``"burst"`` (the provider's), ``"headroom"`` (no burst: the
    #: window's rule) or ``"window"`` (a burst that a window of the limit holds, and
    #: the window's rule the smaller).
    capacity_rule: str
    #: The most requests any interval of the provider's window can see, sends up to
    #: the guard late included.
    most_in_window: float
    #: Tokens of the margin that the guard takes (``refill x guard``).
    guard_tokens: float = 0.0
    #: True when the headroom's rate left no room for one token and the guard, and
    #: the refill was cut below it.
    rate_cut: bool = False


@dataclass(frozen=True)
class LeakyBucketSize:
    capacity: float
    leak_per_sec: float
    longest_wait: float
    #: The most requests any interval of the provider's window can see (as above).
    most_in_window: float = 0.0
    #: True when the guard cut the rate below the headroom's.
    rate_cut: bool = False


@dataclass(frozen=True)
class SlidingWindowSize:
    limit: float
    window_seconds: float
    #: Passed as ``guard=``: each grant counts for ``window_seconds + guard``.
    guard: float = 0.0

    @property
    def per_second(self) -> float:
        """The sustained rate, the guard's cost included."""
        return self.limit / (self.window_seconds + self.guard)


def settings(burst: object, headroom: object, guard: object) -> tuple[float | None, float, float]:
    """``burst`` (``None``: none published), ``headroom`` and ``guard`` (``None``: the
    default on real time) checked, as the rules take them.

    Raises:
        TypeError, ValueError: one of them is not a number in its range; the message
            names it and repeats the value.
    """
    checked = None if burst is None else _validate.positive("burst", burst)
    share = _validate.real("headroom", headroom)
    if not 0 <= share < 1:
        raise ValueError(f"headroom must be from 0 to below 1, got {headroom!r}")
    return checked, share, guard_seconds(guard, None, DEFAULT_GUARD)


def _whole_limit(limit: Rate) -> tuple[int, float]:
    """``(L, T)`` with ``L`` whole: a provider's "0.5/s" is one request per 2 s."""
    if limit.count < 1:
        return 1, limit.window / limit.count
    return math.floor(limit.count + 1e-9), limit.window


def _one_token_rate(burst: float, rho: float, guard: float) -> float:
    """The fastest rate at which grants of one token at a time stay within a provider's
    bucket of ``burst`` at ``rho`` when sent up to ``guard`` late: the faster of two
    sufficient rules, ``1 + r guard <= burst`` and a spacing of ``1 / rho + guard``."""
    bunched = (burst - 1) / guard if guard > 0 else math.inf
    return min(rho, max(bunched, 1 / (1 / rho + guard)))


def token_bucket_size(
    limit: Rate, burst: float | None, headroom: float, guard: float = DEFAULT_GUARD
) -> TokenBucketSize:
    """The token bucket for ``limit`` and ``burst`` at ``headroom`` and ``guard`` (see the module)."""
    rho = limit.per_second
    count, window = _whole_limit(limit)
    span = window + guard
    # Whether the provider may count per window: no burst, or one that a window holds.
    windowed = burst is None or burst <= count
    refill = rho * (1 - headroom)
    if windowed and count - _fit(refill * span) < 1:
        refill = (count - _BELOW) / span
    capacity: float = math.inf
    rule = "headroom"
    if burst is not None:
        capacity, rule = math.floor(burst - max(burst * headroom, refill * guard) + 1e-9), "burst"
        if capacity < 1:
            capacity, refill = 1, min(refill, _one_token_rate(burst, rho, guard))
    if windowed:
        counted = max(1, count - _fit(refill * span))
        if counted < capacity:
            capacity, rule = counted, "headroom" if burst is None else "window"
    most = capacity + _fit(refill * span)
    cut = refill < rho * (1 - headroom)
    return TokenBucketSize(float(capacity), refill, rule, float(most), refill * guard, cut)


def leaky_bucket_size(
    limit: Rate, burst: float | None, headroom: float, workers: int, guard: float = DEFAULT_GUARD
) -> LeakyBucketSize:
    """The leaky bucket for ``limit`` and ``burst`` at ``headroom`` and ``guard`` (see the module)."""
    rho = limit.per_second
    rate = rho * (1 - headroom)
    count, window = _whole_limit(limit)
    # A burst: the bucket's rule with one token; a window: one grant and the rest fit.
    most_rate = _one_token_rate(burst, rho, guard) if burst is not None else (count - _BELOW) / (window + guard)
    cut = most_rate < rate
    rate = min(rate, most_rate)
    most = 1 + _fit(rate * (window + guard))
    return LeakyBucketSize(float(workers + 1), rate, workers / rate, float(most), cut)


def sliding_window_size(
    limit: Rate, burst: float | None, headroom: float, refill: float, guard: float = DEFAULT_GUARD
) -> SlidingWindowSize:
    """The sliding window for ``limit`` and ``burst`` at ``headroom`` and ``guard`` (see the module);
    ``refill``: the token bucket's, whose sustained rate a window for a burst keeps."""
    if burst is not None:
        allowed = float(max(1, math.floor(burst * (1 - headroom) + 1e-9)))
        return SlidingWindowSize(allowed, allowed / refill, guard)
    count, window = (limit.count, limit.window) if limit.count >= 1 else _whole_limit(limit)
    return SlidingWindowSize(float(max(1, math.floor(count * (1 - headroom) + 1e-9))), window, guard)
