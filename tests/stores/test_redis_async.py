"""The asyncio path through redis.asyncio clients: same decisions, no thread hops."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import fakeredis.aioredis
import pytest
import redis.asyncio
import redis.asyncio.cluster

from ratelimit import BackendUnavailable, Composite, ManualClock, RedisBackend, SlidingWindow, TokenBucket
from ratelimit._stores.redis.held_connection import AsyncHeldConnection

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


# -- a held connection that reads its replies itself: no task per call, none stranded ---


async def _quiet() -> None:
    """Until no task but this one runs: the hand-overs of cancelled calls have landed."""
    for _ in range(2000):
        if len(asyncio.all_tasks()) <= 1:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("a hand-over never ended")


@pytest.mark.parametrize("coalesce", [True, False], ids=["caller alone", "no rounds"])
@pytest.mark.parametrize("method", ["acquire_async", "try_acquire_async"])
def test_a_task_cancelled_at_any_step_of_a_call_read_here_strands_nothing(
    method: str, coalesce: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One token and no refill to speak of: a grant stranded by any of the cancels shows.
    pytest.importorskip("hiredis")
    read_on = AsyncHeldConnection._read_on
    handed = [0]

    async def counted(self: Any, *args: Any) -> None:
        handed[0] += 1
        await read_on(self, *args)

    monkeypatch.setattr(AsyncHeldConnection, "_read_on", counted)

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(REDIS_URL)
        backend = RedisBackend(client, coalesce=coalesce)
        clock = ManualClock(1_000.0)
        warm = TokenBucket(1, 1e-6, backend=backend, name=unique_name(), clock=clock)
        assert await warm.try_acquire_async()  # the held connection made, the library loaded
        for steps in range(8):
            limiter = TokenBucket(1, 1e-6, backend=backend, name=unique_name(), clock=clock)
            task = asyncio.ensure_future(getattr(limiter, method)())
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
                landed = True  # it ran to its end before the cancel: its grant is its own
            except asyncio.CancelledError:
                landed = False
            await _quiet()
            # Whatever the moment, the token is back unless the task kept it.
            assert await limiter.try_acquire_async() is not landed, steps
        await backend.aclose()
        await client.aclose()

    asyncio.run(scenario())
    assert handed[0] >= 1  # some of the cancels fell while a reply was awaited


@pytest.mark.servers
@pytest.mark.parametrize("on_unavailable", ["raise", "allow"])
def test_a_grant_landing_after_its_task_left_is_given_back_by_the_connection_that_reads_it(
    on_unavailable: str,
) -> None:
    # The server stops (SIGSTOP) with a decision's command in it: its task is
    # cancelled (or its deadline passes, and the failure policy decides for it); once
    # the server goes on, the grant it made is read off the connection and given back.
    pytest.importorskip("hiredis")
    from conftest import private_server

    server = private_server()

    async def scenario(how: str) -> None:
        client = redis.asyncio.Redis.from_url(server.url, socket_timeout=0.3)
        backend = RedisBackend(client, coalesce=False, on_unavailable=on_unavailable)  # type: ignore[arg-type]
        limiter = TokenBucket(1, 1e-6, backend=backend, name=unique_name(), clock=ManualClock(1_000.0))
        other = TokenBucket(1, 1e-6, backend=backend, name=unique_name(), clock=ManualClock(1_000.0))
        assert await other.try_acquire_async()  # connected, the library loaded
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        try:
            task = asyncio.ensure_future(limiter.try_acquire_async())
            await asyncio.sleep(0.05)  # the command is out, and its reply awaited
            if how == "cancelled":
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            elif on_unavailable == "allow":
                assert await task  # granted without the store, at its deadline
            else:
                with pytest.raises(BackendUnavailable):
                    await task
        finally:
            os.kill(server.pid, signal.SIGCONT)
        await _quiet()
        assert limiter.stats().cancelled == 1
        assert await limiter.try_acquire_async()  # the store's grant went back
        assert not await other.try_acquire_async()  # and read as its own reply, not another's
        await backend.aclose()
        await client.aclose()

    try:
        for how in ("cancelled", "timed out"):
            asyncio.run(scenario(how))
    finally:
        server.cleanup()


def test_an_uncontended_call_read_here_makes_no_task(monkeypatch: pytest.MonkeyPatch) -> None:
    # The task per call that keeps a grant from being stranded is made only where the
    # call cannot hand a late reply over itself: here, for a loop's first call only.
    pytest.importorskip("hiredis")
    made = [0]
    task_factory = asyncio.Task

    def counted(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return task_factory(*args, **kwargs)

    async def scenario() -> None:
        asyncio.get_running_loop().set_task_factory(lambda loop, coro, **kw: counted(coro, loop=loop, **kw))
        client = redis.asyncio.Redis.from_url(REDIS_URL)
        for coalesce in (True, False):
            backend = RedisBackend(client, coalesce=coalesce)
            limiter = TokenBucket(100, 1, backend=backend, name=unique_name(), clock=ManualClock(1_000.0))
            assert await limiter.try_acquire_async()
            made[0] = 0
            for _ in range(20):
                assert await limiter.acquire_async() == 0.0
                assert await limiter.try_acquire_async()
            assert made[0] == 0
            await backend.aclose()
        await client.aclose()

    asyncio.run(scenario())


def test_the_serving_gates_leveled_decision_hands_late_grants_over_with_no_task_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What an ASGI middleware's request pays (acquire_level_async): no task per call,
    # and a request cancelled at any step keeps nothing.
    pytest.importorskip("hiredis")
    from ratelimit._limiting.front import acquire_level_async

    made = [0]
    task_factory = asyncio.Task

    def counted(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return task_factory(*args, **kwargs)

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(REDIS_URL)
        backend = RedisBackend(client)
        clock = ManualClock(1_000.0)
        plenty = TokenBucket(100, 1, backend=backend, name=unique_name(), clock=clock)
        assert (await acquire_level_async(plenty, 1, 0.0))[1] is not None
        asyncio.get_running_loop().set_task_factory(lambda loop, coro, **kw: counted(coro, loop=loop, **kw))
        for _ in range(20):
            wait, level = await acquire_level_async(plenty, 1, 0.0)
            assert wait == 0.0
            assert level is not None
        assert made[0] == 0
        for steps in range(6):
            one = TokenBucket(1, 1e-6, backend=backend, name=unique_name(), clock=clock)
            leaving = asyncio.ensure_future(acquire_level_async(one, 1, 0.0))
            for _ in range(steps):
                await asyncio.sleep(0)
            leaving.cancel()
            try:
                await leaving
                kept = True
            except asyncio.CancelledError:
                kept = False
            await _quiet()
            assert await one.try_acquire_async() is not kept, steps
        await backend.aclose()
        await client.aclose()

    asyncio.run(scenario())
