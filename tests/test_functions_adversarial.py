"""The function library under hostile and careless use.

What a deployment does to the library that ``test_functions.py`` does not: a flush
that lands between the load and the call sent again, a flush in a loop while threads
decide, a server that is full, restarted, or lets a user call but not load; many
callers making their first decision at once; and what the code key and ``counters=``
promise. Private servers on free loopback ports; time is a :class:`ManualClock`.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from ratelimit import ManualClock, RedisBackend, TokenBucket
from ratelimit._stores.scripts import by_function

from conftest import unavailable, unique_name
from servers import RedisServer

pytestmark = pytest.mark.redis


def _server(*extra: str, **options: Any) -> RedisServer:
    if shutil.which("redis-server") is None:
        unavailable("redis-server is not installed")
    server = RedisServer(None, *extra, **options)
    try:
        server.start()
    except RuntimeError as exc:  # pragma: no cover - environment trouble
        server.cleanup()
        unavailable(f"could not start a private redis-server: {exc}")
    return server


@pytest.fixture
def server() -> Iterator[RedisServer]:
    made = _server()
    yield made
    made.cleanup()


def _calls(admin: redis.Redis, command: str) -> int:
    stats: dict[str, Any] = admin.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def _bucket(backend: RedisBackend, capacity: int = 3, name: str | None = None) -> TokenBucket:
    # Next to no refill: what the budget grants shows at once.
    return TokenBucket(capacity, 0.001, backend=backend, name=name or unique_name("adv"), clock=ManualClock(1_000.0))


# -- the library lost again between its load and the call sent after it ------------------


def test_a_flush_between_the_load_and_the_second_call_reaches_no_caller(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    client = redis.Redis.from_url(server.url)
    load = client.function_load

    def load_then_lost(*args: Any, **kwargs: Any) -> Any:
        # Another process flushes right after this one loaded: its FCALL finds nothing.
        loaded = load(*args, **kwargs)
        admin.function_flush()
        return loaded

    client.function_load = load_then_lost  # type: ignore[method-assign]
    backend = RedisBackend(client, coalesce=False)
    bucket = _bucket(backend)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert by_function(client)  # a lost library is no reason to give Functions up
    backend.close()
    admin.close()


def test_a_flush_between_the_load_and_the_second_call_for_an_asyncio_client(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)

    async def scenario() -> list[bool]:
        client = redis.asyncio.Redis.from_url(server.url)
        load = client.function_load

        async def load_then_lost(*args: Any, **kwargs: Any) -> Any:
            loaded = await load(*args, **kwargs)
            admin.function_flush()
            return loaded

        client.function_load = load_then_lost  # type: ignore[method-assign]
        backend = RedisBackend(client, coalesce=False)
        bucket = _bucket(backend)
        got = [await bucket.try_acquire_async() for _ in range(4)]
        assert by_function(client)
        await client.aclose()
        return got

    assert asyncio.run(scenario()) == [True, True, True, False]
    admin.close()


def test_function_flush_in_a_loop_while_fifty_threads_decide(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, coalesce=False)
    capacity = 300
    bucket = _bucket(backend, capacity)
    stop = threading.Event()
    errors: list[BaseException] = []
    grants = [0] * 50

    def flusher() -> None:
        while not stop.is_set():
            admin.function_flush()

    def decider(index: int) -> None:
        try:
            for _ in range(10):
                grants[index] += bucket.try_acquire()
        except BaseException as exc:  # every error is the finding
            errors.append(exc)

    flushing = threading.Thread(target=flusher)
    flushing.start()
    deciders = [threading.Thread(target=decider, args=(i,)) for i in range(50)]
    for thread in deciders:
        thread.start()
    for thread in deciders:
        thread.join()
    stop.set()
    flushing.join()
    assert errors == []
    assert sum(grants) == capacity  # no refill at all: the budget, exactly
    backend.close()
    admin.close()
