"""Sizing a limiter from a provider's documented limits: the arithmetic, no I/O.

Given "1,000 requests/min, burst 20", N workers, a headroom ``h`` (the fraction of
the provider's rate deliberately left unused, so that network jitter, clock steps and
retries never push the provider over its limit) and a guard ``g`` (how late a request
may leave after its grant, see ``ratelimit._limiting.guard``), :func:`size` recommends settings
that keep the provider's limit for sends up to ``g`` late. The three limiters' rules
are ``ratelimit._limiting.sizing``'s, which ``ratelimit.for_limit`` builds from too;
this module adds what only the command prints:

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

from .._limiting.guard import DEFAULT_GUARD
from .._limiting.sizing import (
    DEFAULT_HEADROOM,
    LeakyBucketSize,
    SlidingWindowSize,
    TokenBucketSize,
    leaky_bucket_size,
    settings,
    sliding_window_size,
    token_bucket_size,
)
from .._validate import Rate

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
    if workers < 1 or boxes < 1:
        raise ValueError(f"workers and boxes must be >= 1, got {workers!r} and {boxes!r}")
    if demand is not None and not (0 <= demand < math.inf):
        raise ValueError(f"demand must be >= 0, got {demand!r}")
    burst, headroom, guard = settings(burst, headroom, guard)
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
