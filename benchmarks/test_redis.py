"""Redis ``try_acquire`` of each algorithm, next to two floors from the same run.

- ``PING``: one round trip and nothing else;
- ``EVALSHA`` of an empty script: one round trip into the Lua engine, what any
  script-based limiter must pay at the least.

``benchmarks/conftest.py`` prints each as a multiple of the fastest floor; the target
is to stay within 1 / 0.85 of the empty EVALSHA. Needs the server at ``REDIS_URL``
(default ``redis://127.0.0.1:6379/0``); skipped without one.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from pytest_benchmark.fixture import BenchmarkFixture

from ratelimit import Acquirer, LeakyBucket, RedisBackend, SlidingWindow, TokenBucket

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
HUGE = 1e15

pytestmark = pytest.mark.benchmark(group="redis-try_acquire")


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(URL)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        pytest.skip(f"no Redis at {URL}")
    yield client
    client.close()


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
}


@pytest.mark.parametrize("kind", list(LIMITERS))
def test_try_acquire(benchmark: BenchmarkFixture, client: redis.Redis, kind: str) -> None:
    limiter = LIMITERS[kind](RedisBackend(client), f"bench-{uuid.uuid4().hex[:8]}")
    measure(benchmark, limiter.try_acquire)
    assert limiter.try_acquire() is True
