"""The asyncio path through redis.asyncio clients: same decisions, no thread hops."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis.aioredis
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


class GatedClient(fakeredis.aioredis.FakeRedis):
    """A client whose script calls wait at a gate, as a slow round trip would."""

    gate: asyncio.Event
    arrived: asyncio.Event

    async def evalsha(self, *args: Any, **kwargs: Any) -> Any:
        self.arrived.set()
        await self.gate.wait()
        return await super().evalsha(*args, **kwargs)

    async def fcall(self, *args: Any, **kwargs: Any) -> Any:
        self.arrived.set()
        await self.gate.wait()
        return await super().fcall(*args, **kwargs)


@pytest.mark.parametrize("method", ["acquire_async", "try_acquire_async"])
def test_a_task_cancelled_while_the_store_decides_strands_nothing(method: str) -> None:
    async def scenario() -> tuple[bool, int]:
        client = GatedClient()
        client.gate, client.arrived = asyncio.Event(), asyncio.Event()
        clock = ManualClock(1_000.0)
        # One token, and no refill to speak of: a stranded grant would show.
        limiter = TokenBucket(1, 1e-6, backend=RedisBackend(client), name=unique_name(), clock=clock)
        task = asyncio.ensure_future(getattr(limiter, method)())
        await client.arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Only now does the store answer: it granted the token to a task that is gone.
        client.gate.set()
        for _ in range(50):
            await asyncio.sleep(0.01)
            if limiter.stats().cancelled:
                break
        got = await limiter.try_acquire_async()
        await client.aclose()
        return got, limiter.stats().cancelled

    got, cancelled = asyncio.run(scenario())
    assert got, "the grant that landed after the cancel was given back"
    assert cancelled == 1
