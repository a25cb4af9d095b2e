"""Redis ``try_acquire`` of each algorithm, next to two floors from the same run.

- ``PING``: one round trip and nothing else;
- ``EVALSHA`` of an empty script: one round trip into the Lua engine, what any
  script-based limiter must pay at the least.

``benchmarks/conftest.py`` prints each as a multiple of the fastest floor; the target
is to stay within 1 / 0.85 of the empty EVALSHA. Needs the server at ``REDIS_URL``
(default ``redis://127.0.0.1:6379/0``); skipped without one.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from pytest_benchmark.fixture import BenchmarkFixture

from ratelimit import Acquirer, Adaptive, LeakyBucket, RedisBackend, SlidingWindow, TokenBucket

#: Lines for the terminal summary (benchmarks/conftest.py prints them).
REPORT: list[str] = []

HUGE = 1e15

pytestmark = pytest.mark.benchmark(group="redis-try_acquire")


def measure(benchmark: BenchmarkFixture, call: Callable[[], object]) -> None:
    benchmark.pedantic(  # type: ignore[no-untyped-call]
        call, rounds=100, iterations=60, warmup_rounds=2
    )


def test_floor_ping(benchmark: BenchmarkFixture, client: redis.Redis) -> None:
    measure(benchmark, client.ping)


def test_floor_evalsha_empty(benchmark: BenchmarkFixture, client: redis.Redis) -> None:
    sha = client.script_load("return 0")
    measure(benchmark, lambda: client.evalsha(sha, 1, "ratelimit:{bench}:empty"))


LIMITERS: dict[str, Callable[[RedisBackend, str], Acquirer]] = {
    "token_bucket": lambda b, n: TokenBucket(HUGE, HUGE, backend=b, name=n),
    "leaky_bucket": lambda b, n: LeakyBucket(HUGE, HUGE, backend=b, name=n),
    "sliding_window": lambda b, n: SlidingWindow(HUGE, 0.001, backend=b, name=n),
    "sliding_window_approx": lambda b, n: SlidingWindow(HUGE, 1.0, approximate=True, backend=b, name=n),
    "token_bucket_adaptive": lambda b, n: TokenBucket(HUGE, HUGE, adaptive=Adaptive(), backend=b, name=n),
}


@pytest.mark.parametrize("kind", list(LIMITERS))
def test_try_acquire(benchmark: BenchmarkFixture, client: redis.Redis, kind: str) -> None:
    limiter = LIMITERS[kind](RedisBackend(client), f"bench-{uuid.uuid4().hex[:8]}")
    measure(benchmark, limiter.try_acquire)
    assert limiter.try_acquire() is True


def script_calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    # A decision is an FCALL of the library, or a script where the server has no Functions.
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("fcall", "evalsha", "eval"))


@pytest.mark.parametrize("kind", list(LIMITERS))
def test_commands_per_grant_under_contention(client: redis.Redis, kind: str) -> None:
    """16 threads demanding about 10x what the limiter supplies: at most one call per
    grant, and fewer where the threads share a round (coalescing)."""
    rate, threads, seconds = 200.0, 16, 1.0
    backend = RedisBackend(client)
    name = f"contention-{uuid.uuid4().hex[:8]}"
    makers: dict[str, Callable[[], Acquirer]] = {
        "token_bucket": lambda: TokenBucket(10, rate, backend=backend, name=name),
        "leaky_bucket": lambda: LeakyBucket(1_000, rate, backend=backend, name=name),
        "sliding_window": lambda: SlidingWindow(20, 20 / rate, backend=backend, name=name),
        "sliding_window_approx": lambda: SlidingWindow(20, 20 / rate, approximate=True, backend=backend, name=name),
        "token_bucket_adaptive": lambda: TokenBucket(10, rate, adaptive=Adaptive(), backend=backend, name=name),
    }
    limiter = makers[kind]()
    grants = [0] * threads
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        while time.monotonic() < stop:
            limiter.acquire()
            grants[i] += 1

    before = script_calls(client)
    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    calls = script_calls(client) - before
    total = sum(grants)
    REPORT.append(f"{kind:<24} {total:>6} grants  {calls:>6} script calls  {calls / total:.3f} per grant")
    assert calls <= total
