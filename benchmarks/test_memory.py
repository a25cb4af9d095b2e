"""Uncontended ``try_acquire`` of each in-process limiter, next to a floor.

The floor is the least any thread-safe limiter must do: take and release a
``threading.Lock`` and read ``time.monotonic()``. ``benchmarks/conftest.py`` prints
each limiter's median as a multiple of the floor measured in the same run.

Run: ``make bench`` (or ``pytest benchmarks --benchmark-enable``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from ratelimit import Acquirer, Adaptive, LeakyBucket, SlidingWindow, TokenBucket

# Limits so large that no call is ever refused: this measures the decision, not waiting.
HUGE = 1e15

LIMITERS: dict[str, Callable[[], Acquirer]] = {
    "token_bucket": lambda: TokenBucket(HUGE, HUGE),
    "leaky_bucket": lambda: LeakyBucket(HUGE, HUGE),
    # A short window keeps the exact log small, as in steady use: entries age out. No
    # guard: its 50 ms would make this window 51 times longer, and a log of calls a
    # microsecond apart as long (at a real API's pace it holds a few entries).
    "sliding_window": lambda: SlidingWindow(HUGE, 0.001, guard=0),
    "sliding_window_approx": lambda: SlidingWindow(HUGE, 1.0, approximate=True, guard=0),
    # A learned rate beside the bucket (a group of two): what adaptive= costs.
    "token_bucket_adaptive": lambda: TokenBucket(HUGE, HUGE, adaptive=Adaptive()),
}


def measure(benchmark: BenchmarkFixture, call: Callable[[], object]) -> None:
    """The same fixed iterations for every candidate, so timer overhead is shared alike."""
    benchmark.pedantic(  # type: ignore[no-untyped-call]
        call, rounds=300, iterations=1_000, warmup_rounds=10
    )


@pytest.mark.benchmark(group="memory-try_acquire")
def test_floor_lock_and_monotonic(benchmark: BenchmarkFixture) -> None:
    lock = threading.Lock()
    monotonic = time.monotonic

    def floor() -> None:
        lock.acquire()
        monotonic()
        lock.release()

    measure(benchmark, floor)


@pytest.mark.benchmark(group="memory-try_acquire")
@pytest.mark.parametrize("kind", list(LIMITERS))
def test_try_acquire(benchmark: BenchmarkFixture, kind: str) -> None:
    limiter = LIMITERS[kind]()
    measure(benchmark, limiter.try_acquire)
    assert limiter.try_acquire() is True
