"""The asyncio path through redis.asyncio clients: same decisions, no thread hops."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio
import redis.asyncio.cluster

from ratelimit import Composite, ManualClock, RedisBackend, SlidingWindow, TokenBucket

from conftest import REDIS_URL, unique_name
from servers import RedisCluster

pytestmark = pytest.mark.redis


@pytest.mark.usefixtures("redis_client")
def test_asyncio_client_gives_the_same_waits() -> None:
    async def scenario() -> tuple[list[float], bool]:
        client = redis.asyncio.Redis.from_url(REDIS_URL)
        clock = ManualClock(1_000.0)
        backend = RedisBackend(client)
        limiter = TokenBucket(2, 4, backend=backend, name=unique_name(), clock=clock)
        waits = [await limiter.acquire_async() for _ in range(4)]
        refused = await limiter.try_acquire_async()
        await client.aclose()
        return waits, refused

    waits, refused = asyncio.run(scenario())
    assert waits == [0.0, 0.0, 0.25, 0.25]
    assert refused is False


def test_an_asyncio_client_refuses_the_blocking_methods() -> None:
    backend = RedisBackend(redis.asyncio.Redis.from_url(REDIS_URL))
    limiter = TokenBucket(2, 4, backend=backend, name=unique_name())
    with pytest.raises(TypeError, match="_async"):
        limiter.try_acquire()


@pytest.mark.usefixtures("redis_client")
def test_from_url_serves_sync_and_async_from_one_backend() -> None:
    backend = RedisBackend.from_url(REDIS_URL)
    clock = ManualClock(1_000.0)
    limiter = SlidingWindow(3, 10, backend=backend, name=unique_name(), clock=clock)
    assert limiter.try_acquire()

    async def more() -> list[bool]:
        granted = [await limiter.try_acquire_async() for _ in range(3)]
        await backend.aclose()
        return granted

    assert asyncio.run(more()) == [True, True, False]


@pytest.mark.cluster
def test_asyncio_cluster_client_runs_a_composite(redis_cluster: RedisCluster) -> None:
    url = redis_cluster.url

    async def scenario() -> list[float]:
        backend = RedisBackend.from_url(url, cluster=True)
        clock = ManualClock(1_000.0)
        composite = Composite(
            [TokenBucket(1, 2), SlidingWindow(5, 60)], backend=backend, name=unique_name(), clock=clock
        )
        waits = [await composite.acquire_async() for _ in range(3)]
        await backend.aclose()
        return waits

    assert asyncio.run(scenario()) == [0.0, 0.5, 0.5]
