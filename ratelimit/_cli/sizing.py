"""Sizing a limiter from a provider's documented limits: the arithmetic, no I/O.

Given "1,000 requests/min, burst 20", N workers, a headroom ``h`` (the fraction of
the provider's rate deliberately left unused, so that network jitter, clock steps and
retries never push the provider over its limit) and a guard ``g`` (how late a request
may leave after its grant, see ``ratelimit._limiting.guard``), :func:`size` recommends settings
that keep the provider's limit for sends up to ``g`` late.

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
- **static split**, for comparison: each worker gets ``refill / N`` and ``capacity /
  N`` of its own. Its throughput is ``refill * busy / N`` with only ``busy`` workers
  busy: the idle workers' shares are stranded. A per-worker capacity below one token
  cannot be had (a bucket must hold one whole request), which silently makes the
  total burst ``N``.

**Expected wait at a demand** ``lam`` (requests per second from all workers together,
arrivals taken as Poisson, i.e. bursty), with ``mu`` the refill and ``C`` the capacity:

- ``lam >= mu``: no steady state; the backlog grows by ``lam - mu`` requests a second
  and a call arriving after ``t`` seconds waits about ``t * (lam / mu - 1)``, without
  bound.
- ``lam < mu``: a GCRA token bucket's wait is exactly ``max(0, V - (C - 1) / mu)``,
  where ``V`` is the waiting time in an M/D/1 queue with service time ``1 / mu`` (the
  TAT minus now evolves by Lindley's recursion). With ``rho = lam / mu``, its mean is
  ``Wq = rho / (2 mu (1 - rho))`` (Pollaczek-Khinchine), and its tail is close to
  ``P(V > x) = theta Wq exp(-theta x)``, with ``theta > 0`` solving
  ``lam (exp(theta / mu) - 1) = theta`` (the tail's exact decay rate). Hence::

      E[wait] ~= Wq * exp(-theta (C - 1) / mu)

  Against the real ``TokenBucket`` fed Poisson arrivals this comes within 15%
  (``tests/cli/test_cli_size.py``) wherever the wait is worth a millisecond; it overstates
  waits that are tiny anyway (a large burst at low load). A leaky bucket is the case ``C = 1`` (no burst):
  ``E[wait] = Wq`` exactly. The static split is the same formula per worker with
  ``lam / N``, ``mu / N`` and the per-worker capacity, assuming the demand is spread
  evenly (uneven is worse).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._limiting.guard import DEFAULT_GUARD, guard_seconds
from .rates import Rate

__all__ = [
    "DEFAULT_GUARD",
    "DEFAULT_HEADROOM",
    "LeakyBucketSize",
    "Sizing",
    "SlidingWindowSize",
    "StaticSplit",
    "TokenBucketSize",
    "Waits",
    "expected_wait",
    "leaky_bucket_size",
    "md1_wait",
    "size",
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
    #: Why this capacity: ``"burst"`` (the provider's) or ``"headroom"`` (the rule above).
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


@dataclass(frozen=True)
class BusyRow:
    """Throughput with ``busy`` of the workers busy (the rest idle)."""

    busy: int
    shared_per_sec: float
    static_per_sec: float


@dataclass(frozen=True)
class StaticSplit:
    workers: int
    refill_per_sec: float
    #: ``capacity / workers``, as the split would have it.
    capacity: float
    #: What a bucket can really hold: at least one whole request.
    usable_capacity: float
    #: The total burst the split really allows (``usable_capacity * workers``).
    total_burst: float
    per_box_refill: float
    busy: tuple[BusyRow, ...]


@dataclass(frozen=True)
class Waits:
    demand_per_sec: float
    utilisation: float
    #: False when demand is at or above the rate: waits grow without bound.
    bounded: bool
    #: When unbounded, how many requests the backlog gains per second.
    backlog_growth: float
    #: Expected seconds per call (``inf`` when unbounded).
    token_bucket: float
    leaky_bucket: float
    static_split: float


@dataclass(frozen=True)
class Sizing:
    limit: Rate
    burst: float | None
    workers: int
    boxes: int
    headroom: float
    #: Seconds a request may leave after its grant with every recommendation still
    #: keeping the provider's limit.
    guard: float
    token_bucket: TokenBucketSize
    leaky_bucket: LeakyBucketSize
    sliding_window: SlidingWindowSize
    static: StaticSplit
    waits: Waits | None


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
    refill = rho * (1 - headroom)
    count, window = _whole_limit(limit)
    cut = False
    if burst is not None:
        capacity = math.floor(burst - max(burst * headroom, refill * guard) + 1e-9)
        if capacity < 1:
            most = _one_token_rate(burst, rho, guard)
            capacity, cut, refill = 1, refill > most, min(refill, most)
        rule = "burst"
    else:
        span = window + guard
        if count - _fit(refill * span) < 1:
            refill, cut = (count - _BELOW) / span, True
        capacity, rule = max(1, count - _fit(refill * span)), "headroom"
    most = capacity + _fit(refill * (window + guard))
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


def _decay(rho: float) -> float:
    # x = theta / mu > 0 with rho (exp(x) - 1) = x. f(x) = rho (exp(x) - 1) - x is
    # convex, negative just above 0 (f'(0) = rho - 1 < 0) and positive for large x:
    # one root, found by bisection.
    def f(x: float) -> float:
        return rho * math.expm1(x) - x

    low, high = 0.0, 1.0
    while f(high) < 0:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        if f(middle) < 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def md1_wait(demand: float, rate: float) -> float:
    """Mean wait in an M/D/1 queue (Poisson arrivals at ``demand``, service ``1/rate``)."""
    if demand >= rate:
        return math.inf
    rho = demand / rate
    return rho / (2 * rate * (1 - rho))


def expected_wait(demand: float, rate: float, capacity: float) -> float:
    """Mean wait of a call to a token bucket (``capacity``, ``rate``) at Poisson ``demand``.

    ``Wq * exp(-theta (C - 1) / mu)`` as derived in the module's docstring; ``inf`` when
    ``demand >= rate``; 0 for no demand.
    """
    if demand <= 0:
        return 0.0
    wq = md1_wait(demand, rate)
    if math.isinf(wq):
        return wq
    return wq * math.exp(-_decay(demand / rate) * max(0.0, capacity - 1))


def size(
    limit: Rate,
    burst: float | None = None,
    workers: int = 1,
    boxes: int = 1,
    headroom: float = DEFAULT_HEADROOM,
    demand: float | None = None,
    guard: float = DEFAULT_GUARD,
) -> Sizing:
    """Recommend every algorithm's settings for ``workers`` sharing ``limit``.

    Args:
        limit: the provider's documented rate.
        burst: the provider's documented burst, if any.
        workers: how many workers share the budget, on all boxes together.
        boxes: how many machines they run on (for the per-box static split).
        headroom: the fraction of the provider's rate left unused, from 0 to below 1.
        demand: requests per second the workers would like to send, all together.
        guard: seconds a request may leave after its grant with every
            recommendation still keeping the provider's limit (``ratelimit._limiting.guard``).

    Raises:
        ValueError: an argument out of range.
    """
    if burst is not None and not (0 < burst < math.inf):
        raise ValueError(f"burst must be > 0, got {burst!r}")
    if workers < 1 or boxes < 1:
        raise ValueError(f"workers and boxes must be >= 1, got {workers!r} and {boxes!r}")
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom must be from 0 to below 1, got {headroom!r}")
    if demand is not None and not (0 <= demand < math.inf):
        raise ValueError(f"demand must be >= 0, got {demand!r}")
    guard = guard_seconds(guard, None, DEFAULT_GUARD)
    bucket = token_bucket_size(limit, burst, headroom, guard)
    rate = bucket.refill_per_sec
    leaky = leaky_bucket_size(limit, burst, headroom, workers, guard)
    window = sliding_window_size(limit, burst, headroom, limit.per_second * (1 - headroom), guard)
    share = bucket.capacity / workers
    usable = max(1.0, share)
    counts = sorted({1, max(1, workers // 4), max(1, workers // 2), workers})
    static = StaticSplit(
        workers=workers,
        refill_per_sec=rate / workers,
        capacity=share,
        usable_capacity=usable,
        total_burst=usable * workers,
        per_box_refill=rate / boxes,
        busy=tuple(BusyRow(n, rate, rate * n / workers) for n in counts),
    )
    waits = None
    if demand is not None:
        waits = Waits(
            demand_per_sec=demand,
            utilisation=demand / rate,
            bounded=demand < rate,
            backlog_growth=max(0.0, demand - rate),
            token_bucket=expected_wait(demand, rate, bucket.capacity),
            leaky_bucket=md1_wait(demand, leaky.leak_per_sec) if demand > 0 else 0.0,
            static_split=expected_wait(demand / workers, rate / workers, usable),
        )
    return Sizing(limit, burst, workers, boxes, headroom, guard, bucket, leaky, window, static, waits)
