"""The exact sliding window through Redis on a FULL window, at limits 100 to 100,000.

A full window is the costly case: every call must find the moment enough grants will
have aged out. The log keeps running sums of its weights, so that is a search, O(log n)
Redis calls whatever the limit; the target is a call at limit 100,000 within 2x of one
at limit 100. ``PING`` is the floor of the same run. The summary also prints the
memory Redis spends per grant (``MEMORY USAGE`` of the set over its entries).

The window is filled by writing the sorted set as the script writes it (one member
``"<sum>|<weight>"`` per grant, scored by its time): 100,000 grants through the script
one by one would take the run's whole budget. One real grant is made first, through
the limiter, so the key and its format are the script's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from pytest_benchmark.fixture import BenchmarkFixture
from test_redis import REPORT

from ratelimit import RedisBackend, SlidingWindow

pytestmark = pytest.mark.benchmark(group="redis-full-window")

WINDOW = 3_600.0
LIMITS = [100, 10_000, 100_000]


def measure(benchmark: BenchmarkFixture, call: object) -> None:
    benchmark.pedantic(  # type: ignore[no-untyped-call]
        call, rounds=50, iterations=40, warmup_rounds=2
    )


def test_floor_ping(benchmark: BenchmarkFixture, client: redis.Redis) -> None:
    measure(benchmark, client.ping)


def full_window(client: redis.Redis, limit: int) -> Iterator[SlidingWindow]:
    backend = RedisBackend(client)
    name = f"bench-full-{uuid.uuid4().hex[:8]}"
    limiter = SlidingWindow(limit, WINDOW, backend=backend, name=name, guard=0)
    assert limiter.try_acquire()
    key = backend.key(name, "sliding_window")
    (member,) = client.zrange(key, 0, -1)
    assert member == b"1|1", member  # the format written below
    seconds, micros = client.time()
    now = seconds + micros / 1e6
    # Grants spread over the last half window, oldest first, one token each.
    step = WINDOW / 2 / limit
    client.delete(key)
    for start in range(0, limit, 10_000):
        chunk = range(start, min(limit, start + 10_000))
        client.zadd(key, {f"{i + 1}|1": now - WINDOW / 2 + i * step for i in chunk})
    client.expire(key, int(WINDOW))
    assert not limiter.try_acquire()  # full: every call searches
    used = client.memory_usage(key) or 0
    REPORT.append(f"full window of {limit:>7,} grants: {used / limit:6.1f} bytes per grant in Redis")
    yield limiter
    client.delete(key)


@pytest.mark.parametrize("limit", LIMITS)
def test_refused_on_a_full_window(benchmark: BenchmarkFixture, client: redis.Redis, limit: int) -> None:
    for limiter in full_window(client, limit):
        measure(benchmark, limiter.try_acquire)
        assert not limiter.try_acquire()
