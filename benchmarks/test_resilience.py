"""What the retry runner and the circuit breaker add to a call that succeeds at once.

Two groups, each with its own floor from the same run:

- ``resilience-memory``: a plain call of a function doing a ``threading.Lock`` round
  and a ``time.monotonic()`` (the in-process floor), then the same function through
  ``Retry.call``, through ``CircuitBreaker.call``, and through both with a limiter;
- ``resilience-redis``: an empty ``EVALSHA`` (one round trip into the Lua engine), then
  a shared breaker's ``allow`` + ``record``, which are two script calls by design.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest
import redis
from pytest_benchmark.fixture import BenchmarkFixture

from ratelimit import CircuitBreaker, RedisBackend, Retry, TokenBucket

HUGE = 1e15

_lock = threading.Lock()


def work() -> int:
    _lock.acquire()
    time.monotonic()
    _lock.release()
    return 0


def measure(benchmark: BenchmarkFixture, call: Callable[[], object], iterations: int = 1_000) -> None:
    benchmark.pedantic(  # type: ignore[no-untyped-call]
        call, rounds=100, iterations=iterations, warmup_rounds=5
    )


@pytest.mark.benchmark(group="resilience-memory")
def test_floor_the_bare_call(benchmark: BenchmarkFixture) -> None:
    measure(benchmark, work)


@pytest.mark.benchmark(group="resilience-memory")
def test_retry_call(benchmark: BenchmarkFixture) -> None:
    retry = Retry()
    measure(benchmark, lambda: retry.call(work))


@pytest.mark.benchmark(group="resilience-memory")
def test_breaker_call(benchmark: BenchmarkFixture) -> None:
    breaker = CircuitBreaker()
    measure(benchmark, lambda: breaker.call(work))


@pytest.mark.benchmark(group="resilience-memory")
def test_retry_with_limiter_and_breaker(benchmark: BenchmarkFixture) -> None:
    retry = Retry(limiter=TokenBucket(HUGE, HUGE), breaker=CircuitBreaker())
    measure(benchmark, lambda: retry.call(work))


@pytest.mark.benchmark(group="resilience-redis")
def test_floor_evalsha_empty(benchmark: BenchmarkFixture, client: redis.Redis) -> None:
    sha = client.script_load("return 0")
    measure(benchmark, lambda: client.evalsha(sha, 1, "ratelimit:{bench}:empty"), iterations=60)


@pytest.mark.benchmark(group="resilience-redis")
def test_shared_breaker_call(benchmark: BenchmarkFixture, client: redis.Redis) -> None:
    breaker = CircuitBreaker(backend=RedisBackend(client), name=f"bench-{uuid.uuid4().hex[:8]}")
    measure(benchmark, lambda: breaker.call(work), iterations=60)
    assert breaker.state == "closed"
