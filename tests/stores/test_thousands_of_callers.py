"""Thousands of callers in one process on one limiter through Redis.

A busy client is not an unreachable store: callers beyond the backend's pool wait
their turn and get exact answers, whatever ``on_unavailable`` says (a pool with no
connection to spare is not "Redis is down"): tasks and threads by the thousand, a
small or already busy pool, a hung server that fails its queued callers together,
cancelled waiters, a CPU-busy event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from ratelimit import AcquireTimeout, BackendUnavailable, Composite, RedisBackend, SlidingWindow, TokenBucket

from conftest import REDIS_URL, unique_name
from servers import RedisServer, SilentServer

pytestmark = pytest.mark.redis

#: Capacity is the whole budget: the refill is too slow to add a token during a test.
CAPACITY = 10
SLOW = 1e-6


def _clients_named(redis_client: redis.Redis, name: str) -> int:
    listing: list[dict[str, Any]] = redis_client.client_list()
    return sum(1 for client in listing if client.get("name") == name)


@pytest.mark.stress
@pytest.mark.parametrize("policy", ["raise", "allow"])
def test_ten_thousand_tasks_get_exact_answers(redis_client: redis.Redis, policy: str) -> None:
    tag = unique_name("conn")
    backend = RedisBackend.from_url(REDIS_URL, on_unavailable=policy, client_name=tag)  # type: ignore[arg-type]
    limiter = TokenBucket(CAPACITY, SLOW, backend=backend, name=unique_name())
    most_connections = 0

    async def scenario() -> list[bool]:
        nonlocal most_connections

        async def watch() -> None:
            nonlocal most_connections
            while True:
                most_connections = max(most_connections, _clients_named(redis_client, tag))
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        granted = await asyncio.gather(*(limiter.try_acquire_async() for _ in range(10_000)))
        watcher.cancel()
        await backend.aclose()
        return granted

    granted = asyncio.run(scenario())
    assert sum(granted) == CAPACITY
    assert backend.stats().failures == 0
    # The connections a process needs do not grow with its callers.
    assert most_connections <= backend.pool_size


@pytest.mark.stress
def test_ten_thousand_waiting_acquires_with_timeouts(redis_client: redis.Redis) -> None:
    backend = RedisBackend.from_url(REDIS_URL)
    limiter = TokenBucket(CAPACITY, SLOW, backend=backend, name=unique_name())

    async def one() -> float | None:
        try:
            return await limiter.acquire_async(timeout=1)
        except AcquireTimeout as exc:
            return -exc.retry_after

    async def scenario() -> list[float | None]:
        waits = await asyncio.gather(*(one() for _ in range(10_000)))
        await backend.aclose()
        return waits

    waits = [w for w in asyncio.run(scenario()) if w is not None]
    assert sum(1 for w in waits if w >= 0) == CAPACITY
    # Every refusal says how long its grant needed: a full refill's worth or more.
    assert all(w < -(1 / SLOW) * 0.99 for w in waits if w < 0)
    assert backend.stats().failures == 0


@pytest.mark.stress
def test_two_hundred_threads_get_exact_answers(redis_client: redis.Redis) -> None:
    backend = RedisBackend.from_url(REDIS_URL, on_unavailable="allow")
    limiter = TokenBucket(CAPACITY, SLOW, backend=backend, name=unique_name())
    start = threading.Barrier(200)
    granted: list[bool] = []

    def worker() -> None:
        start.wait()
        for _ in range(5):
            granted.append(limiter.try_acquire())

    threads = [threading.Thread(target=worker) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(granted) == 1_000
    assert sum(granted) == CAPACITY
    assert backend.stats().failures == 0
    backend.close()


@pytest.mark.stress
def test_a_composite_and_a_window_under_a_thousand_tasks(redis_client: redis.Redis) -> None:
    backend = RedisBackend.from_url(REDIS_URL, on_unavailable="allow")
    composite = Composite([TokenBucket(CAPACITY, SLOW), SlidingWindow(50, 3600)], backend=backend, name=unique_name())
    window = SlidingWindow(CAPACITY, 3600, backend=backend, name=unique_name())

    async def scenario() -> tuple[int, int]:
        a = await asyncio.gather(*(composite.try_acquire_async() for _ in range(1_000)))
        b = await asyncio.gather(*(window.try_acquire_async() for _ in range(1_000)))
        await backend.aclose()
        return sum(a), sum(b)

    assert asyncio.run(scenario()) == (CAPACITY, CAPACITY)
    assert backend.stats().failures == 0


def test_a_client_with_a_small_pool_is_never_asked_for_more(redis_client: redis.Redis) -> None:
    # Given a client of its own whose pool holds 4 connections, the backend keeps to 4.
    client = redis.Redis.from_url(REDIS_URL, max_connections=4)
    backend = RedisBackend(client, on_unavailable="allow")
    assert backend.pool_size == 4
    limiter = TokenBucket(CAPACITY, SLOW, backend=backend, name=unique_name())
    granted: list[bool] = []
    threads = [threading.Thread(target=lambda: granted.append(limiter.try_acquire())) for _ in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(granted) == CAPACITY
    assert backend.stats().failures == 0
    client.close()


def test_a_pool_full_because_of_other_code_is_waited_out(redis_client: redis.Redis) -> None:
    client = redis.Redis.from_url(REDIS_URL, max_connections=2)
    backend = RedisBackend(client, on_unavailable="allow")
    limiter = TokenBucket(CAPACITY, SLOW, backend=backend, name=unique_name())
    # Other code sharing the client holds every connection for a moment.
    held = [client.connection_pool.get_connection() for _ in range(2)]

    def release() -> None:
        for connection in held:
            client.connection_pool.release(connection)

    releaser = threading.Timer(0.2, release)
    releaser.start()
    assert limiter.try_acquire()  # waited for a connection instead of failing open
    releaser.join()
    assert backend.stats().failures == 0
    client.close()


@pytest.fixture
def silent_server() -> Iterator[str]:
    with SilentServer() as silent:
        yield silent.url


@pytest.mark.slow
def test_callers_queued_behind_a_hung_server_fail_together(silent_server: str) -> None:
    # 100 threads, 2 connections, a server that never answers: the first two time
    # out (0.5 s each); the 98 queued behind them fail at once, not 49 timeouts later.
    backend = RedisBackend.from_url(silent_server, pool_size=2)
    limiter = TokenBucket(CAPACITY, SLOW, backend=backend, name="hung")
    errors: list[BaseException] = []
    start = threading.Barrier(100)

    def worker() -> None:
        start.wait()
        try:
            limiter.try_acquire()
        except BackendUnavailable as exc:
            errors.append(exc)

    began = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    assert len(errors) == 100
    # Serially that would be 50 x 0.5 s; generous for a loaded machine.
    assert elapsed < 10
    backend.close()


@pytest.mark.slow
def test_asyncio_callers_queued_behind_a_hung_server_fail_together(silent_server: str) -> None:
    backend = RedisBackend.from_url(silent_server, pool_size=2)
    limiter = TokenBucket(CAPACITY, SLOW, backend=backend, name="hung")

    async def scenario() -> list[BaseException | bool]:
        results = await asyncio.gather(*(limiter.try_acquire_async() for _ in range(1_000)), return_exceptions=True)
        await backend.aclose()
        return results

    began = time.monotonic()
    results = asyncio.run(scenario())
    assert all(isinstance(r, BackendUnavailable) for r in results)
    assert time.monotonic() - began < 10  # serially: 500 x 0.5 s


def test_pool_size_is_checked() -> None:
    with pytest.raises(ValueError, match="pool_size must be >= 1, got 0"):
        RedisBackend(redis.Redis(), pool_size=0)
    with pytest.raises(TypeError, match=r"pool_size must be an int, got float 2\.5"):
        RedisBackend(redis.Redis(), pool_size=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pool_size must be an int >= 1, got -3"):
        RedisBackend.from_url(REDIS_URL, pool_size=-3)


@pytest.mark.servers
def test_after_a_stall_the_next_calls_reach_the_server_again(redis_client: redis.Redis) -> None:
    # Found by trying: 2,000 tasks retrying on a backend, Redis stalled once for
    # 0.7 s. Every waiter failed fast counted as a failure itself and failed the ones
    # behind it, so with a queue that never emptied nothing reached the server again.
    # The server here is private: CLIENT PAUSE stops every client of a server.
    with RedisServer() as server:
        admin = redis.Redis.from_url(server.url)
        backend = RedisBackend.from_url(server.url)
        limiter = TokenBucket(1e6, 1e6, backend=backend, name="stalled")
        answered_after: list[float] = []

        async def scenario() -> None:
            began = time.monotonic()
            stop = False

            async def worker() -> None:
                while not stop:
                    try:
                        await limiter.try_acquire_async()
                        answered_after.append(time.monotonic() - began)
                    except BackendUnavailable:
                        await asyncio.sleep(0.01)

            workers = [asyncio.create_task(worker()) for _ in range(2_000)]
            await asyncio.sleep(0.5)
            await asyncio.to_thread(admin.execute_command, "CLIENT", "PAUSE", "700", "ALL")
            await asyncio.sleep(3.0)
            stop = True
            await asyncio.gather(*workers)
            await backend.aclose()

        asyncio.run(scenario())
        admin.close()
    # Answers resumed within a generous second of the stall ending (at about 1.2 s).
    assert any(t > 2.2 for t in answered_after)
    assert sum(1 for t in answered_after if t > 2.2) > 1_000


def test_tasks_cancelled_while_waiting_for_a_turn_leave_every_turn_usable(redis_client: redis.Redis) -> None:
    # 2,000 tasks queue for 2 turns; half are cancelled while they wait (or just as
    # a turn is handed to them). The rest, and everyone after, still get answers.
    backend = RedisBackend.from_url(REDIS_URL, pool_size=2)
    limiter = TokenBucket(1e6, 1e6, backend=backend, name=unique_name())

    async def scenario() -> tuple[int, int]:
        tasks = [asyncio.create_task(limiter.try_acquire_async()) for _ in range(2_000)]
        await asyncio.sleep(0)
        for task in tasks[1::2]:
            task.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        after = await asyncio.gather(*(limiter.try_acquire_async() for _ in range(100)))
        await backend.aclose()
        return sum(1 for r in done if r is True), sum(after)

    answered, after = asyncio.run(scenario())
    assert answered >= 1_000
    assert after == 100
    assert backend.stats().failures == 0


@pytest.mark.slow
def test_a_cpu_busy_event_loop_is_not_an_unavailable_server(redis_client: redis.Redis) -> None:
    # Found by trying: 500 tasks on a loop whose other work took 45-200 ms between
    # turns got "no reply" errors from a healthy server, each failing the queue behind
    # it: a tick that ran late was charged all but its lateness.
    backend = RedisBackend.from_url(REDIS_URL)
    limiter = TokenBucket(1e6, 1e6, backend=backend, name=unique_name())
    answered = 0

    async def scenario() -> None:
        nonlocal answered
        stop = False

        async def worker() -> None:
            nonlocal answered
            while not stop:
                await limiter.acquire_async()
                answered += 1

        async def hog() -> None:
            while not stop:
                time.sleep(0.01)  # noqa: ASYNC251 -- CPU work that does not yield: 0.2 s per turn of 20
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(worker()) for _ in range(500)]
        tasks += [asyncio.create_task(hog()) for _ in range(20)]
        await asyncio.sleep(3)
        stop = True
        await asyncio.gather(*tasks)
        await backend.aclose()

    asyncio.run(scenario())
    assert answered > 0
    assert backend.stats().failures == 0


def test_a_cancellation_that_meets_a_deadline_is_not_swallowed() -> None:
    # Found by trying: cancelled by its owner in the same turn as its call timed out,
    # a task saw BackendUnavailable and kept its cancellation pending for ever.
    from ratelimit._stores.redis.loops import Watch

    async def scenario() -> str:
        loop = asyncio.get_running_loop()
        watch = Watch(loop, 0.5)
        forever: asyncio.Future[None] = loop.create_future()

        async def call() -> str:
            task = asyncio.current_task()
            assert task is not None
            watch.start(task)
            try:
                await forever
            except asyncio.CancelledError:
                return "timed out" if watch.timed_out(task) else "cancelled"
            return "answered"

        task = asyncio.create_task(call())
        await asyncio.sleep(0)
        watch.calls[task] = (loop.time() - 1, watch.busy)  # its deadline has passed
        watch._tick(loop.time())  # on time: the watch cancels it
        task.cancel()  # and so does its owner, in the same turn
        return await task

    assert asyncio.run(scenario()) == "cancelled"
