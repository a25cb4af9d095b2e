"""Real time, real threads and tasks: the achieved rate is the configured one.

The few tests of the suite that do sleep: they measure real rates over about 1.5 s
each, with bounds generous enough for a busy shared machine and tight enough to catch
a limiter that is off by more than a few percent, or ever above its bound.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import statistics
import threading
import time
from collections.abc import Callable

import pytest

from ratelimit import Acquirer, AcquireTimeout, LeakyBucket, SlidingWindow, TokenBucket

pytestmark = pytest.mark.slow

SECONDS = 1.5
# A grant is timestamped after the granted thread wakes and takes the GIL, a few ms
# after the moment it was granted for. Counting over intervals this much shorter than
# the limit's own keeps that jitter from reading as a violation.
JITTER = 0.02


def most_in_any_window(times: list[float], width: float) -> int:
    times = sorted(times)
    return max(bisect.bisect_left(times, t + width) - i for i, t in enumerate(times))


def run_threads(limiter: Acquirer, threads: int, seconds: float) -> list[float]:
    """Every grant's time, from ``threads`` threads acquiring for ``seconds``."""
    grants: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def work() -> None:
        while True:
            try:
                limiter.acquire(timeout=max(0.0, stop - time.monotonic()))
            except AcquireTimeout:
                return
            with lock:
                grants.append(time.monotonic())

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return grants


def run_tasks(limiter: Acquirer, tasks: int, seconds: float) -> list[float]:
    grants: list[float] = []

    async def main() -> None:
        stop = time.monotonic() + seconds

        async def work() -> None:
            while True:
                try:
                    await limiter.acquire_async(timeout=max(0.0, stop - time.monotonic()))
                except AcquireTimeout:
                    return
                grants.append(time.monotonic())

        await asyncio.gather(*(work() for _ in range(tasks)))

    asyncio.run(main())
    return grants


Runner = Callable[[Acquirer, int, float], list[float]]


@pytest.mark.parametrize(("run", "workers"), [(run_threads, 8), (run_tasks, 50)], ids=["threads", "tasks"])
def test_token_bucket_rate(run: Runner, workers: int) -> None:
    capacity, rate = 5, 100.0
    grants = run(TokenBucket(capacity, rate), workers, SECONDS)
    allowed = capacity + rate * SECONDS
    # Never above the bound (a grant due exactly at the end of the run still counts).
    assert len(grants) <= allowed + 1
    assert most_in_any_window(grants, 1.0 - JITTER) <= capacity + rate
    # And not wasting budget: within a few percent of everything allowed.
    assert len(grants) >= 0.95 * allowed


def test_sliding_window_rate_with_threads() -> None:
    limit, window = 50, 0.5
    grants = run_threads(SlidingWindow(limit, window), 8, SECONDS)
    assert most_in_any_window(grants, window - JITTER) <= limit
    assert len(grants) >= 0.95 * limit * SECONDS / window


def test_leaky_bucket_spacing_with_threads() -> None:
    grants = sorted(run_threads(LeakyBucket(capacity=10, leak_per_sec=100), 8, SECONDS))
    gaps = [b - a for a, b in itertools.pairwise(grants)]
    assert statistics.median(gaps) == pytest.approx(0.01, rel=0.10)
    assert len(grants) >= 0.95 * 100 * SECONDS
