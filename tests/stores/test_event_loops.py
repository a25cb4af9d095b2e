"""One backend, any number of event loops; and whose clock a shared budget runs on.

Before: a backend reused across ``asyncio.run()`` calls failed every second run with
``RuntimeError('Event loop is closed')`` (even under ``"allow"``) and left unclosed
transports; and ``clock=SystemClock()`` sent each host's ``monotonic()`` to Redis,
so beside a default limiter of the same name it asked for a 57-year wait.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings

import pytest
import redis

from ratelimit import (
    AcquireTimeout,
    CircuitBreaker,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    SlidingWindow,
    SystemClock,
    TokenBucket,
)
from ratelimit._stores.redis.backend import key_for

from conftest import REDIS_URL, unique_name

pytestmark = pytest.mark.redis


def _connections(redis_client: redis.Redis, tag: str, settled_at: int | None = None) -> int:
    """Connections named ``tag``; with ``settled_at``, waits (at most 2 s) for the count
    to reach it: the server notices a closed socket on its next turn, not at once."""
    deadline = time.monotonic() + 2
    while True:
        count = sum(1 for client in redis_client.client_list() if client.get("name") == tag)
        if settled_at is None or count == settled_at or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


@pytest.mark.parametrize("policy", ["raise", "allow"])
def test_one_backend_serves_one_event_loop_after_another(redis_client: redis.Redis, policy: str) -> None:
    tag = unique_name("loops")
    backend = RedisBackend.from_url(REDIS_URL, on_unavailable=policy, client_name=tag)  # type: ignore[arg-type]
    limiter = TokenBucket(3, 1e-6, backend=backend, name=unique_name())
    answers = [asyncio.run(limiter.try_acquire_async()) for _ in range(5)]
    assert answers == [True, True, True, False, False]
    assert backend.stats().failures == 0
    # Each loop's client closed with its loop: no connection left open, and no
    # unclosed transport for the garbage collector to warn about (warnings are errors).
    gc.collect()
    assert _connections(redis_client, tag, settled_at=0) == 0


def test_event_loops_in_several_threads_at_once(redis_client: redis.Redis) -> None:
    backend = RedisBackend.from_url(REDIS_URL)
    limiter = TokenBucket(40, 1e-6, backend=backend, name=unique_name())
    granted: list[int] = []
    start = threading.Barrier(4)

    async def twenty() -> int:
        answers = await asyncio.gather(*(limiter.try_acquire_async() for _ in range(20)))
        return sum(answers)

    def worker() -> None:
        start.wait()
        granted.append(asyncio.run(twenty()))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(granted) == 40
    assert backend.stats().failures == 0


def test_a_synchronous_client_serves_every_event_loop_too(redis_client: redis.Redis) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    limiter = TokenBucket(2, 1e-6, backend=RedisBackend(client), name=unique_name())
    assert [asyncio.run(limiter.try_acquire_async()) for _ in range(3)] == [True, True, False]
    client.close()


def test_context_managers_release_the_connections(redis_client: redis.Redis) -> None:
    tag = unique_name("closing")
    with RedisBackend.from_url(REDIS_URL, client_name=tag) as backend:
        assert TokenBucket(1, 1, backend=backend, name=unique_name()).try_acquire()
        assert _connections(redis_client, tag) == 1
    assert _connections(redis_client, tag, settled_at=0) == 0

    async def scenario() -> int:
        async with RedisBackend.from_url(REDIS_URL, client_name=tag) as backend:
            assert await TokenBucket(1, 1, backend=backend, name=unique_name()).try_acquire_async()
            during = _connections(redis_client, tag)
        assert _connections(redis_client, tag, settled_at=0) == 0
        return during

    assert asyncio.run(scenario()) == 1


def test_a_backend_is_usable_again_after_aclose(redis_client: redis.Redis) -> None:
    backend = RedisBackend.from_url(REDIS_URL)
    limiter = TokenBucket(2, 1e-6, backend=backend, name=unique_name())

    async def scenario() -> list[bool]:
        first = await limiter.try_acquire_async()
        await backend.aclose()
        return [first, await limiter.try_acquire_async(), await limiter.try_acquire_async()]

    assert asyncio.run(scenario()) == [True, True, False]


# -- one budget, one clock --------------------------------------------------------------


def test_a_system_clock_on_redis_uses_the_server_s_time(redis_client: redis.Redis) -> None:
    backend = RedisBackend(redis_client)
    name = unique_name()
    default = TokenBucket(5, 1, backend=backend, name=name)
    explicit = TokenBucket(5, 1, backend=backend, name=name, clock=SystemClock())
    assert [default.try_acquire() for _ in range(5)] == [True] * 5
    # One budget: spent; the next token is a second away (it was 57 years away).
    with pytest.raises(AcquireTimeout) as info:
        explicit.acquire(timeout=0)
    assert 0.9 < info.value.retry_after <= 1.0


def test_a_test_clock_never_meets_a_real_budget(redis_client: redis.Redis) -> None:
    backend = RedisBackend(redis_client)
    name = unique_name()
    real = TokenBucket(2, 1e-6, backend=backend, name=name)
    pretend = TokenBucket(2, 1e-6, backend=backend, name=name, clock=ManualClock(1_000.0))
    assert [real.try_acquire() for _ in range(3)] == [True, True, False]
    assert [pretend.try_acquire() for _ in range(3)] == [True, True, False]
    assert redis_client.exists(key_for(name, "token_bucket"))
    assert redis_client.exists(key_for(name, "token_bucket", injected=True))


def test_a_breaker_on_a_system_clock_uses_the_server_s_time(redis_client: redis.Redis) -> None:
    name = unique_name()
    breaker = CircuitBreaker(min_calls=1, backend=RedisBackend(redis_client), name=name, clock=SystemClock())
    breaker.record(breaker.allow(), False)
    assert breaker.state == "open"
    assert redis_client.exists(key_for(name, "breaker"))


def test_limiters_sharing_a_name_in_memory_must_share_a_clock() -> None:
    backend = MemoryBackend()
    clock = ManualClock()
    TokenBucket(1, 1, backend=backend, name="shared", clock=clock)
    TokenBucket(1, 1, backend=backend, name="shared", clock=clock)  # the same clock: fine
    with pytest.raises(ValueError, match="cannot share the budget named 'shared'"):
        TokenBucket(1, 1, backend=backend, name="shared")
    with pytest.raises(ValueError, match="cannot share the budget named 'shared'"):
        TokenBucket(1, 1, backend=backend, name="shared", clock=ManualClock())
    # Real time is one clock, however it is spelt.
    SlidingWindow(1, 1, backend=backend, name="real")
    SlidingWindow(1, 1, backend=backend, name="real", clock=SystemClock())


def test_a_backend_forgets_event_loops_that_are_gone(redis_client: redis.Redis) -> None:
    # Found by trying: every asyncio.run() left an entry (its loop, client and gate)
    # for good, and loops closed without shutting down their async generators kept a
    # pool of connections each until backend.close().
    tag = unique_name("forget")
    backend = RedisBackend.from_url(REDIS_URL, client_name=tag)
    limiter = TokenBucket(1e6, 1e6, backend=backend, name=unique_name())
    for _ in range(20):
        assert asyncio.run(limiter.try_acquire_async())
    assert len(backend._loops) == 0
    with warnings.catch_warnings():
        # Those loops' transports are closed by the garbage collector, which says so.
        warnings.simplefilter("ignore", ResourceWarning)
        for _ in range(5):
            loop = asyncio.new_event_loop()
            assert loop.run_until_complete(limiter.try_acquire_async())
            loop.close()  # without shutdown_asyncgens
        assert asyncio.run(limiter.try_acquire_async())  # a new loop forgets the closed ones
        assert len(backend._loops) == 0
        gc.collect()
    assert _connections(redis_client, tag, settled_at=0) == 0
