"""Coalescing (``coalesce=``: the calls of many callers sent as one script call per
round) and leases (``lease=``: a batch of the shared budget spent locally).

Leases run on an injected clock, so their time is the test's: a lease ends when the
clock says so, and the bound is checked on the times the callers were granted.
"""

from __future__ import annotations

import asyncio
import linecache
import math
import os
import random
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratelimit import (
    AcquireTimeout,
    Adaptive,
    Composite,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)
from ratelimit._stores.redis.handles import RedisHandle
from ratelimit._stores.redis.rounds import MOST_PER_ROUND, Ask, Round, Rounds

from conftest import REDIS_URL, unique_name

REDIS_STORES = ["fakeredis", "redis", "cluster"]


@pytest.fixture(params=REDIS_STORES)
def server(request: pytest.FixtureRequest) -> Any:
    """What several backends (several "processes") share: a client factory."""
    if request.param == "fakeredis":
        shared = fakeredis.FakeServer()
        return lambda: fakeredis.FakeRedis(server=shared)
    if request.param == "redis":
        client = request.getfixturevalue("redis_client")
        return lambda: client
    cluster = request.getfixturevalue("cluster_client")
    return lambda: cluster


class Calls:
    """Counts the script calls a backend makes, and what each round carried."""

    def __init__(self, backend: RedisBackend) -> None:
        self.calls = 0
        self.rounds: list[int] = []
        run, run_async = backend.run, backend.run_async

        def counted(*args: Any) -> Any:
            self.calls += 1
            return run(*args)

        async def counted_async(*args: Any) -> Any:
            self.calls += 1
            return await run_async(*args)

        backend.run = counted  # type: ignore[method-assign,assignment]
        backend.run_async = counted_async  # type: ignore[method-assign,assignment]

    def watch(self, limiter: Any) -> None:
        rounds = rounds_of(limiter)
        decide, decide_async = rounds._decide, rounds._decide_async

        def seen(rnd: Round) -> Any:
            self.rounds.append(len(rnd.asks))
            return decide(rnd)

        async def seen_async(rnd: Round) -> Any:
            self.rounds.append(len(rnd.asks))
            return await decide_async(rnd)

        rounds._decide, rounds._decide_async = seen, seen_async
        # A caller alone skips the round's bookkeeping, not its call: a round of one.
        one, one_async = rounds._decide_one, rounds._decide_one_async
        if one is not None and one_async is not None:

            def seen_one(request: Any, max_wait: float) -> Any:
                self.rounds.append(1)
                return one(request, max_wait)

            async def seen_one_async(request: Any, max_wait: float, late: Any = None) -> Any:
                self.rounds.append(1)
                return await one_async(request, max_wait, late)

            rounds._decide_one, rounds._decide_one_async = seen_one, seen_one_async


def rounds_of(limiter: Any) -> Rounds:
    handle = limiter._handle
    assert isinstance(handle, RedisHandle)
    assert handle.rounds is not None
    return handle.rounds


def within_bucket(times: list[float], capacity: float, rate: float) -> bool:
    """Whether grants at ``times`` (one token each) keep a token bucket's arrival curve:
    at most ``capacity + rate * (b - a)`` in any interval ``[a, b]``."""
    times = sorted(times)
    for i in range(len(times)):
        for j in range(i, len(times)):
            if j - i + 1 > capacity + rate * (times[j] - times[i]) + 1e-6:
                return False
    return True


# -- leases -------------------------------------------------------------------------


def test_a_lease_is_spent_locally_until_it_ends_and_its_rest_goes_back(server: Any) -> None:
    clock = ManualClock(start=1_000.0)
    backend = RedisBackend(server())
    calls = Calls(backend)
    name = unique_name("lease")
    limiter = TokenBucket(100, 10, backend=backend, name=name, clock=clock, lease=1.0)
    # 1 s of lease keeps 10 tokens back: 90 may go at once.
    assert limiter._most == 90
    assert limiter.try_acquire()  # the first round: its own token, and a lease of 1
    assert calls.calls == 1
    clock.advance(0.1)
    assert limiter.try_acquire()  # from the lease
    assert calls.calls == 1
    assert limiter.try_acquire()  # a round again: the lease is spent
    assert calls.calls == 2
    leased = rounds_of(limiter).allotted
    assert leased >= 1  # sized to 2 tokens asked in 0.1 s: 20/s for 1 s
    for _ in range(int(leased)):
        assert limiter.try_acquire()
    assert calls.calls == 2
    # Another process, not leasing, keeps the lease's 10 back as well (see
    # test_mixed_leases.py): on the same 90 tokens it sees only what the leases
    # left, and the one token refilled meanwhile.
    other = TokenBucket(100, 10, backend=RedisBackend(server()), name=name, clock=clock)
    taken = 0
    while other.try_acquire():
        taken += 1
    assert taken == 90 - 3 - leased + 1
    # The lease ends after its second; its rest is not spent here any more.
    rounds_of(limiter)._pool = 5.0  # as if five were left
    clock.advance(1.0)
    before = calls.calls
    assert limiter.try_acquire()
    assert calls.calls == before + 1


def test_the_rest_of_an_ended_lease_goes_back_with_the_next_round(server: Any) -> None:
    clock = ManualClock(start=1_000.0)
    name = unique_name("lease")
    backend = RedisBackend(server())
    limiter = TokenBucket(50, 1, backend=backend, name=name, clock=clock, lease=1.0)
    assert limiter._most == 49
    limiter.try_acquire()
    clock.advance(0.01)
    limiter.try_acquire()
    limiter.try_acquire()  # demand of 3 in 0.01 s: a lease as large as the limit allows
    left = rounds_of(limiter).allotted
    assert left > 10
    other = TokenBucket(50, 1, backend=RedisBackend(server()), name=name, clock=clock)  # keeps 49 too
    assert not other.try_acquire(49 - 3 - left + 1)
    clock.advance(2.0)  # the lease has ended, and 2 tokens more have refilled
    limiter.try_acquire()  # gives the rest back, takes its own token
    assert other.try_acquire(49 - 3 - 1 + 2 - rounds_of(limiter).allotted)


def test_close_gives_the_lease_back(server: Any) -> None:
    clock = ManualClock(start=1_000.0)
    name = unique_name("lease")
    backend = RedisBackend(server())
    limiter = TokenBucket(20, 1, backend=backend, name=name, clock=clock, lease=1.0)
    for _ in range(3):
        limiter.try_acquire()
    assert rounds_of(limiter).allotted > 0
    backend.close()
    other = TokenBucket(20, 1, backend=RedisBackend(server()), name=name, clock=clock)  # keeps 19 too
    assert other.try_acquire(19 - 3)


def test_no_lease_is_taken_after_close(server: Any) -> None:
    # Nothing would give it back: the thread that returns leases has stopped.
    clock = ManualClock(start=1_000.0)
    name = unique_name("lease")
    backend = RedisBackend(server())
    limiter = TokenBucket(20, 1, backend=backend, name=name, clock=clock, lease=1.0)
    backend.close()
    for _ in range(3):
        assert limiter.try_acquire()  # the client reconnects: the limiter still works
    assert rounds_of(limiter).allotted == 0
    # A process that does not lease keeps the lease's token back as well (the largest
    # slack in use: see test_mixed_leases.py), so it sees 19 less the 3 taken.
    other = TokenBucket(20, 1, backend=RedisBackend(server()), name=name, clock=clock)
    assert other.try_acquire(19 - 3)


def test_a_lease_a_round_brings_after_close_goes_back() -> None:
    clock = ManualClock(start=1_000.0)
    client = fakeredis.FakeRedis()
    name = unique_name("lease")
    backend = RedisBackend(client)
    limiter = TokenBucket(20, 1, backend=backend, name=name, clock=clock, lease=1.0)
    for _ in range(3):
        assert limiter.try_acquire()
        clock.advance(0.01)
    rounds = rounds_of(limiter)
    rounds.void()  # the next try_acquire makes a round, which asks for a lease
    decide = rounds._decide
    sent, gate = threading.Event(), threading.Event()

    def held(rnd: Round) -> Any:
        sent.set()
        assert gate.wait(10)
        return decide(rnd)

    rounds._decide = held
    thread = threading.Thread(target=limiter.try_acquire)
    thread.start()
    assert sent.wait(10)
    backend.close()  # while the round, which asks for a lease, is out
    gate.set()
    thread.join(10)
    assert rounds.allotted == 0
    other = TokenBucket(20, 1, backend=RedisBackend(client), name=name, clock=clock)  # keeps the lease's token back
    assert other.try_acquire(19 - 4)


def test_an_idle_process_leases_nothing_and_a_busy_one_more() -> None:
    clock = ManualClock(start=1_000.0)
    backend = RedisBackend(fakeredis.FakeRedis())
    calls = Calls(backend)
    limiter = TokenBucket(10_000, 2_000, backend=backend, name=unique_name(), clock=clock, lease=0.5)
    rounds = rounds_of(limiter)
    for per_second in (10, 100, 1_000):
        made = calls.calls
        for _ in range(3 * per_second):
            assert limiter.try_acquire()
            clock.advance(1 / per_second)
        # The demand is measured, and a lease lasts about its half second whatever
        # the demand: the calls do not grow with it.
        assert rounds._rate == pytest.approx(per_second, rel=0.5)
        assert calls.calls - made <= 3 / 0.5 + 3
    # Idle for a while: nothing is leased meanwhile, and the next round measures a
    # low demand and asks for little.
    made = calls.calls
    clock.advance(100.0)
    assert calls.calls == made
    limiter.try_acquire()
    assert rounds.allotted < 10


def test_a_request_the_lease_cannot_cover_goes_in_order() -> None:
    clock = ManualClock(start=1_000.0)
    backend = RedisBackend(fakeredis.FakeRedis())
    limiter = TokenBucket(10, 1, backend=backend, name=unique_name(), clock=clock, lease=1.0)
    handle = limiter._handle
    assert isinstance(handle, RedisHandle)
    assert limiter._most == 9
    limiter.try_acquire()
    clock.advance(0.5)
    limiter.try_acquire()
    limiter.try_acquire()
    assert rounds_of(limiter).allotted == 4  # 2 asked in 0.5 s: 4/s for a second
    big, _ = handle.reserve(9, math.inf)  # more than the lease: the store decides, and it waits
    assert big == pytest.approx(2.5)
    small, _ = handle.reserve(1, math.inf)
    assert small == pytest.approx(3.5)  # behind it: the rest of the lease went back


def test_leases_never_go_to_waiting_callers() -> None:
    # A round whose requests wait takes no lease: no slack to hand out.
    clock = ManualClock(start=1_000.0)
    backend = RedisBackend(fakeredis.FakeRedis())
    limiter = TokenBucket(10, 1, backend=backend, name=unique_name(), clock=clock, lease=1.0)
    for _ in range(9):
        limiter.acquire()
    assert limiter.acquire() > 0
    assert rounds_of(limiter).allotted == 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.2]), st.booleans()),
        min_size=1,
        max_size=120,
    )
)
def test_three_leasing_processes_never_exceed_the_bucket(steps: list[tuple[int, float, bool]]) -> None:
    clock = ManualClock(start=1_000.0)
    shared = fakeredis.FakeServer()
    name = unique_name("bound")
    capacity, rate = 8.0, 20.0
    limiters = [
        TokenBucket(
            capacity, rate, backend=RedisBackend(fakeredis.FakeRedis(server=shared)), name=name, clock=clock, lease=0.1
        )
        for _ in range(3)
    ]
    sent: list[float] = []
    for who, later, wait in steps:
        clock.advance(later)
        if wait:
            try:
                limiters[who].acquire(timeout=0.5)  # the clock sleeps to the grant
            except AcquireTimeout:
                continue
            sent.append(clock.now())
        elif limiters[who].try_acquire():
            sent.append(clock.now())
    assert within_bucket(sent, capacity, rate)


def test_leased_windows_count_each_grant_for_the_lease_too(server: Any) -> None:
    clock = ManualClock(start=1_000.0)
    limiter = SlidingWindow(10, 1.0, backend=RedisBackend(server()), name=unique_name(), clock=clock, lease=0.5)
    assert limiter.algorithm_for(clock).params() == (10.0, 1.5)


# -- coalescing -----------------------------------------------------------------------


def test_a_thousand_tasks_share_a_few_calls_and_each_gets_its_exact_wait(redis_client: redis.Redis) -> None:
    async def main() -> list[float]:
        backend = RedisBackend.from_url(REDIS_URL)
        calls = Calls(backend)
        clock = ManualClock(start=1_000.0)
        limiter = TokenBucket(100, 50, backend=backend, name=unique_name(), clock=clock)
        calls.watch(limiter)
        waits = await asyncio.gather(*(limiter.acquire_async() for _ in range(1_000)))
        client = backend._loops[asyncio.get_running_loop()].client
        pool = client.connection_pool
        connections = len(pool._available_connections) + len(pool._in_use_connections)
        await backend.aclose()
        assert calls.calls <= 5, calls.rounds
        assert connections <= 2
        return waits

    waits = asyncio.run(main())
    # In arrival order, exactly as 1,000 separate calls: 100 at once, then 1/50 s apart.
    assert sorted(waits) == pytest.approx([max(0, i - 99) / 50 for i in range(1_000)], abs=1e-6)


def test_a_hundred_threads_share_rounds(redis_client: redis.Redis) -> None:
    backend = RedisBackend(redis_client)
    calls = Calls(backend)
    clock = ManualClock(start=1_000.0)
    limiter = TokenBucket(10, 5, backend=backend, name=unique_name(), clock=clock)
    calls.watch(limiter)
    waits: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(100)

    def worker() -> None:
        start.wait()
        # The decision alone: a sleep on the shared test clock would move it for the
        # rounds still to come.
        got, _ = limiter._handle.reserve(1.0, math.inf)
        with lock:
            waits.append(got)

    threads = [threading.Thread(target=worker) for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(waits) == 100
    assert sorted(waits) == pytest.approx([max(0, i - 9) / 5 for i in range(100)], abs=1e-6)
    assert calls.calls < 100
    assert max(calls.rounds) > 1


@settings(max_examples=40, deadline=None)
@given(
    asks=st.lists(
        st.tuples(st.sampled_from([0.5, 1.0, 2.0, 3.0]), st.sampled_from([0.0, 0.3, 1.0, math.inf])),
        min_size=1,
        max_size=12,
    ),
    kind=st.sampled_from(["token", "window", "leaky"]),
)
def test_a_batch_decides_as_the_same_calls_one_by_one(asks: list[tuple[float, float]], kind: str) -> None:
    clock = ManualClock(start=1_000.0)
    backend = RedisBackend(fakeredis.FakeRedis())

    def build() -> Any:
        name = unique_name("batch")
        if kind == "token":
            return TokenBucket(4, 2, backend=backend, name=name, clock=clock)
        if kind == "window":
            return SlidingWindow(4, 1.0, backend=backend, name=name, clock=clock)
        return LeakyBucket(6, 2, backend=backend, name=name, clock=clock)

    one, together = build(), build()
    alone = [one._handle.reserve(tokens, wait) for tokens, wait in asks]
    handle = together._handle
    assert isinstance(handle, RedisHandle)
    rnd = Round([Ask(tokens, wait, None) for tokens, wait in asks], None, 0.0, 0.0, clock.now())
    batched = handle.decide(rnd).decisions
    assert len(batched) == len(alone)
    for (wait, at), (wait_alone, at_alone) in zip(batched, alone, strict=True):
        assert wait == pytest.approx(wait_alone, abs=1e-9)
        assert at == pytest.approx(at_alone, abs=1e-9)


def test_a_round_that_fails_fails_every_caller_in_it_and_nobody_hangs() -> None:
    # No retries: redis-py's default retries made each round wait ~4 s (see
    # test_a_client_that_retries_is_named_at_construction).
    dead = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    backend = RedisBackend(dead, on_unavailable="local")
    limiter = TokenBucket(1_000, 1_000, backend=backend, name=unique_name())
    got: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        ok = limiter.try_acquire()
        with lock:
            got.append(ok)

    threads = [threading.Thread(target=worker) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(got) == 50
    assert all(got)
    assert backend.stats().fell_back == 50


def test_cancelled_tasks_give_their_grants_back(redis_client: redis.Redis) -> None:
    async def main() -> None:
        backend = RedisBackend.from_url(REDIS_URL)
        clock = ManualClock(start=1_000.0)
        name = unique_name()
        limiter = TokenBucket(500, 0.001, backend=backend, name=name, clock=clock)
        tasks = [asyncio.ensure_future(limiter.try_acquire_async()) for _ in range(1_000)]
        await asyncio.sleep(0)
        for task in tasks[::2]:
            task.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        kept = sum(1 for d in done if d is True)
        for _ in range(100):  # the give-backs of grants that landed after their cancel
            await asyncio.sleep(0.01)
        # Every token a cancelled task was granted went back: the budget lost only
        # what the callers that stayed were granted.
        other = TokenBucket(500, 0.001, backend=RedisBackend(redis_client), name=name, clock=clock)
        assert other.try_acquire(500 - kept)
        assert not other.try_acquire(1)
        await backend.aclose()

    asyncio.run(main())


# -- what takes a lease and what does not -----------------------------------------------


def test_lease_is_checked_and_named() -> None:
    backend = RedisBackend(fakeredis.FakeRedis())
    for bad, error in ((0, ValueError), (-1, ValueError), (math.nan, ValueError), (61, ValueError), ("1", TypeError)):
        with pytest.raises(error, match="lease"):
            TokenBucket(10, 1, backend=backend, name=unique_name(), lease=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lease"):
        LeakyBucket(10, 1, backend=backend, name=unique_name(), lease=0.1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="lease=1"):
        TokenBucket(10, 100, backend=backend, name=unique_name(), lease=1)
    with pytest.raises(ValueError, match="lease"):
        TokenBucket(10, 1, backend=backend, name=unique_name(), lease=0.1, low_share=0.5)
    leased = TokenBucket(10, 1, backend=backend, name=unique_name(), lease=0.1)
    with pytest.raises(ValueError, match="lease"):
        Composite([leased, TokenBucket(5, 1, backend=backend, name=unique_name())], backend=backend, name="c")
    assert "lease=0.1" in repr(leased)


def test_in_process_a_lease_changes_nothing() -> None:
    limiter = TokenBucket(10, 1, lease=0.5)
    assert limiter.lease == 0.5
    assert limiter._most == 10
    assert MemoryBackend.shared is False


def within_window(times: list[float], limit: float, window: float) -> bool:
    """Whether grants at ``times`` (one token each) keep at most ``limit`` in any
    interval of ``window`` seconds (a grant at ``t`` counts until ``t + window``)."""
    times = sorted(times)
    return all(sum(1 for u in times[i:] if u < t + window - 1e-9) <= limit for i, t in enumerate(times))


@settings(max_examples=25, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from([0.0, 0.001, 0.02, 0.1, 0.4])),
        min_size=1,
        max_size=120,
    ),
    approximate=st.booleans(),
)
def test_three_leasing_processes_never_exceed_the_window(steps: list[tuple[int, float]], approximate: bool) -> None:
    clock = ManualClock(start=1_000.0)
    shared = fakeredis.FakeServer()
    name = unique_name("window")
    limit, window = 6.0, 1.0
    limiters = [
        SlidingWindow(
            limit,
            window,
            approximate=approximate,
            backend=RedisBackend(fakeredis.FakeRedis(server=shared)),
            name=name,
            clock=clock,
            lease=0.2,
        )
        for _ in range(3)
    ]
    sent: list[float] = []
    for who, later in steps:
        clock.advance(later)
        if limiters[who].try_acquire():
            sent.append(clock.now())
    assert within_window(sent, limit, window)


def test_asyncio_tasks_spend_the_lease_without_a_call_each() -> None:
    async def main() -> None:
        clock = ManualClock(start=1_000.0)
        backend = RedisBackend(fakeredis.FakeAsyncRedis())
        calls = Calls(backend)
        limiter = TokenBucket(10_000, 1_000, backend=backend, name=unique_name(), clock=clock, lease=1.0)
        for _ in range(20):
            assert await limiter.try_acquire_async()
            clock.advance(0.01)
        many = await asyncio.gather(*(limiter.try_acquire_async() for _ in range(500)))
        assert all(many)
        assert calls.calls < 20
        assert limiter.stats().granted == 520

    asyncio.run(main())


def test_a_synchronous_client_serves_asyncio_callers_from_the_threads_rounds() -> None:
    async def main() -> None:
        clock = ManualClock(start=1_000.0)
        backend = RedisBackend(fakeredis.FakeRedis())
        assert backend.threaded
        calls = Calls(backend)
        limiter = TokenBucket(10_000, 1_000, backend=backend, name=unique_name(), clock=clock, lease=1.0)
        for _ in range(50):
            assert await limiter.try_acquire_async()
            clock.advance(0.01)
        assert calls.calls < 10

    asyncio.run(main())


def test_feedback_ends_the_lease() -> None:
    clock = ManualClock(start=1_000.0)
    backend = RedisBackend(fakeredis.FakeRedis())
    limiter = TokenBucket(100, 10, backend=backend, name=unique_name(), clock=clock, lease=1.0)
    limiter.try_acquire()
    clock.advance(0.1)
    limiter.try_acquire()
    limiter.try_acquire()
    assert rounds_of(limiter).allotted > 0
    limiter.feedback({"Retry-After": "5"}, status=429)
    assert rounds_of(limiter).allotted == 0
    assert not limiter.try_acquire()  # the pause holds for the lease's rest too


def test_the_rest_of_a_lease_goes_back_when_it_ends(redis_client: redis.Redis) -> None:
    # On real time, a thread gives the rest back at the lease's end, with no acquire
    # to carry it.
    backend = RedisBackend(redis_client)
    name = unique_name("ends")
    limiter = TokenBucket(1_000, 0.001, backend=backend, name=name, lease=0.2)
    for _ in range(200):
        limiter.try_acquire()
    left = rounds_of(limiter).allotted
    assert left > 0
    other = TokenBucket(1_000 - 0.2 * 0.001, 0.001, backend=RedisBackend(redis_client), name=name)
    spent = 200 + left
    assert not other.try_acquire(1_000 - spent + 5)
    deadline = time.monotonic() + 5
    while rounds_of(limiter)._voids or rounds_of(limiter)._pool:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.05)
    assert other.try_acquire(1_000 - 0.2 * 0.001 - 200 - 1)
    backend.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_does_not_spend_its_parents_lease(redis_client: redis.Redis) -> None:
    backend = RedisBackend(redis_client)
    limiter = TokenBucket(1_000, 0.001, backend=backend, name=unique_name("fork"), lease=30.0)
    for _ in range(50):
        limiter.try_acquire()
    assert rounds_of(limiter).allotted > 0
    read, write = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12 warns of forking a process with threads (the lease's returns).
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: what is leased here now?
        os.write(write, repr(rounds_of(limiter).allotted).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert float(os.read(read, 100)) == 0.0
    assert rounds_of(limiter).allotted > 0  # the parent's own is untouched


def test_a_round_carries_at_most_its_share_of_a_crowd(redis_client: redis.Redis) -> None:
    # One script holds Redis for everyone: 2,000 tasks go in rounds of at most
    # MOST_PER_ROUND, each still in arrival order with its exact wait.
    async def main() -> list[float]:
        backend = RedisBackend.from_url(REDIS_URL)
        calls = Calls(backend)
        clock = ManualClock(start=1_000.0)
        limiter = TokenBucket(10, 100, backend=backend, name=unique_name(), clock=clock)
        calls.watch(limiter)
        handle = limiter._handle
        waits = await asyncio.gather(*(handle.reserve_async(1.0, math.inf) for _ in range(2_000)))
        await backend.aclose()
        assert max(calls.rounds) == MOST_PER_ROUND
        assert sum(calls.rounds) == 2_000
        assert len(calls.rounds) <= 2 + 2_000 // MOST_PER_ROUND
        return [wait for wait, _ in waits]

    waits = asyncio.run(main())
    assert waits == pytest.approx([max(0, i - 9) / 100 for i in range(2_000)], abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(
    asks=st.lists(
        st.tuples(
            st.tuples(st.sampled_from([0.0, 1.0, 2.0]), st.sampled_from([1.0, 50.0, 300.0])),
            st.sampled_from([0.0, 0.3, 1.0, math.inf]),
        ),
        min_size=1,
        max_size=10,
    ),
    adaptive=st.booleans(),
)
def test_a_composites_batch_decides_as_the_same_calls_one_by_one(
    asks: list[tuple[tuple[float, float], float]], adaptive: bool
) -> None:
    clock = ManualClock(start=1_000.0)
    backend = RedisBackend(fakeredis.FakeRedis())

    def build() -> Any:
        if adaptive:
            return TokenBucket(4, 2, backend=backend, name=unique_name("group"), clock=clock, adaptive=Adaptive())
        return Composite(
            [TokenBucket(4, 2), SlidingWindow(400, 1.0)], backend=backend, name=unique_name("group"), clock=clock
        )

    one, together = build(), build()
    if adaptive:
        requests: list[Any] = [(max(n, 0.5), max(n, 0.5)) for (n, _), _ in asks]
    else:
        requests = [(n, m) for (n, m), _ in asks]
    alone = [
        one._handle._group.reserve(r, w) if adaptive else one._handle.reserve(r, w)
        for r, (_, w) in zip(requests, asks, strict=True)
    ]
    handle = together._handle._group if adaptive else together._handle
    rnd = Round(
        [Ask(max(r), w, None, r) for r, (_, w) in zip(requests, asks, strict=True)], None, 0.0, 0.0, clock.now()
    )
    batched = handle.decide(rnd).decisions
    assert len(batched) == len(alone)
    for (wait, at), (wait_alone, at_alone) in zip(batched, alone, strict=True):
        assert wait == pytest.approx(wait_alone, abs=1e-9)
        assert at == pytest.approx(at_alone, abs=1e-9)


def test_a_thousand_tasks_on_a_composite_share_rounds(redis_client: redis.Redis) -> None:
    async def main() -> list[float]:
        backend = RedisBackend.from_url(REDIS_URL)
        calls = Calls(backend)
        clock = ManualClock(start=1_000.0)
        llm = Composite(
            [TokenBucket(100, 50), TokenBucket(10_000, 10_000)], backend=backend, name=unique_name(), clock=clock
        )
        handle = llm._handle
        waits = await asyncio.gather(*(handle.reserve_async((1.0, 10.0), math.inf) for _ in range(1_000)))
        await backend.aclose()
        assert calls.calls <= 5
        return [wait for wait, _ in waits]

    waits = asyncio.run(main())
    assert waits == pytest.approx([max(0, i - 99) / 50 for i in range(1_000)], abs=1e-6)


def test_the_rest_of_a_lease_whose_grant_aged_out_frees_nothing_in_a_window() -> None:
    # Found by the property above: a lease's rest given back after its grant had left
    # the window took from other grants, and the window overfilled.
    clock = ManualClock(start=1_000.0)
    shared = fakeredis.FakeServer()
    limiters = [
        SlidingWindow(
            6, 1.0, backend=RedisBackend(fakeredis.FakeRedis(server=shared)), name="w", clock=clock, lease=0.2
        )
        for _ in range(3)
    ]
    sent: list[float] = []
    steps = [(0, 0.0), (1, 0.0), (2, 0.0), (1, 0.001), (1, 0.4), (2, 0.4), (0, 0.4)] + [(0, 0.0)] * 5
    for who, later in steps:
        clock.advance(later)
        if limiters[who].try_acquire():
            sent.append(clock.now())
    assert within_window(sent, 6, 1.0)


# -- a thread interrupted in a round (a signal handler raising, Ctrl-C) ----------------


class Interrupted(Exception):
    """What the test's SIGALRM handler raises, as a signal-based timeout does."""


class HeldRounds:
    """A limiter whose round calls wait at a gate until the test opens it; its
    callers in other threads, and the main thread's, whom a real SIGALRM handler
    interrupts once ``ready(ask)`` says so (``ask``: the main thread's, of 3 tokens)."""

    def __init__(self) -> None:
        self.clock = ManualClock(start=1_000.0)
        self.client = fakeredis.FakeRedis()
        self.name = unique_name("interrupt")
        self.limiter = TokenBucket(100, 0.001, backend=RedisBackend(self.client), name=self.name, clock=self.clock)
        self.rounds = rounds_of(self.limiter)
        self.gates: list[threading.Event] = []
        self.entered: list[threading.Event] = [threading.Event() for _ in range(10)]
        self.sizes: list[int] = []
        decide = self.decide = self.rounds._decide

        def held(rnd: Round) -> Any:
            i = len(self.sizes)
            self.sizes.append(len(rnd.asks))
            self.entered[i].set()
            gate = threading.Event()
            self.gates.append(gate)
            assert gate.wait(10)
            return decide(rnd)

        self.rounds._decide = held
        # The round of a caller alone, held alike.
        one = self.one = self.rounds._decide_one
        assert one is not None

        def held_one(request: Any, max_wait: float) -> Any:
            i = len(self.sizes)
            self.sizes.append(1)
            self.entered[i].set()
            gate = threading.Event()
            self.gates.append(gate)
            assert gate.wait(10)
            return one(request, max_wait)

        self.rounds._decide_one = held_one
        self.threads: list[threading.Thread] = []
        self.got: list[float] = []

    def open(self, i: int) -> None:
        assert self.entered[i].wait(10)
        self.gates[i].set()

    def other(self, tokens: float = 1) -> None:
        """A caller in a thread of its own, queued once this returns."""
        before = len(self.rounds._threads.waiting) + len(self.sizes)

        def run() -> None:
            self.got.append(self.limiter.acquire(tokens))

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)
        deadline = time.monotonic() + 10
        while len(self.rounds._threads.waiting) + len(self.sizes) == before:
            assert time.monotonic() < deadline
            time.sleep(0.001)

    def main_ask(self) -> Ask | None:
        return next((ask for ask in self.rounds._threads.waiting if ask.tokens == 3), None)

    def interrupt_main(self, ready: Callable[[Ask], bool]) -> None:
        """``acquire(3)`` in the main thread, interrupted by a raising SIGALRM handler."""
        seen: list[Ask] = []

        def on_alarm(signum: int, frame: object) -> None:
            if not seen:
                ask = self.main_ask()
                if ask is None:  # not queued yet: look again soon
                    signal.setitimer(signal.ITIMER_REAL, 0.01)
                    return
                seen.append(ask)
            deadline = time.monotonic() + 10
            while not ready(seen[0]):
                assert time.monotonic() < deadline
                time.sleep(0.001)
            raise Interrupted

        previous = signal.signal(signal.SIGALRM, on_alarm)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            with pytest.raises(Interrupted):
                self.limiter.acquire(3)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def finish(self) -> None:
        """Every other caller returns, and the limiter still serves a new one."""
        for gate in self.gates:
            gate.set()
        for i in range(len(self.sizes), len(self.entered)):
            self.entered[i].set()
        self.rounds._decide = self.decide
        self.rounds._decide_one = self.one
        for thread in self.threads:
            thread.join(10)
            assert not thread.is_alive(), "a caller hangs behind the interrupted thread"
        late = threading.Thread(target=self.limiter.acquire, daemon=True)
        late.start()
        late.join(10)
        assert not late.is_alive(), "the limiter hangs for every later caller"

    def spent(self) -> float:
        """What the budget has granted (as another process finds it)."""
        other = TokenBucket(100, 0.001, backend=RedisBackend(self.client), name=self.name, clock=self.clock)
        return 100 - float(sum(1 for _ in iter(lambda: other.try_acquire(1), False)))


needs_alarm = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs SIGALRM")


@needs_alarm
def test_a_thread_interrupted_while_queued_leaves_the_queue() -> None:
    held = HeldRounds()
    held.other()  # leads a round, held at the gate
    # Interrupted while queued behind it: it must not be made the next round's leader.
    held.interrupt_main(lambda ask: True)
    held.other()  # queued behind the held round too
    held.open(0)
    held.finish()
    assert held.spent() == 3  # the two others and the late one; nothing of the main thread's


@needs_alarm
def test_a_promoted_thread_interrupted_before_leading_hands_the_lead_on() -> None:
    held = HeldRounds()
    held.other()
    main_queued = threading.Event()

    def promoted(ask: Ask) -> bool:
        if not main_queued.is_set():
            main_queued.set()
            held.other()  # queued behind the main thread
            held.open(0)  # the round lands: the main thread, first in the queue, leads next
        return ask.lead

    held.interrupt_main(promoted)
    held.finish()
    assert held.spent() == 3


@needs_alarm
def test_an_interrupted_threads_grant_in_a_round_in_flight_goes_back() -> None:
    held = HeldRounds()
    held.other()
    held.other()  # leads the second round, which carries the main thread's request

    def in_flight(ask: Ask) -> bool:
        if held.main_ask() is not None:
            held.open(0)
            return False
        return held.entered[1].is_set()

    held.interrupt_main(in_flight)
    assert held.sizes == [1, 2]
    held.finish()  # the second round grants the main thread's 3 tokens: they go back
    assert held.spent() == 3


@needs_alarm
def test_an_interrupted_threads_grant_already_decided_goes_back() -> None:
    held = HeldRounds()
    held.other()
    held.other()

    def decided(ask: Ask) -> bool:
        held.open(0)
        held.open(1)
        return ask.result is not None

    held.interrupt_main(decided)
    held.finish()
    assert held.spent() == 3


@needs_alarm
def test_threads_interrupted_at_random_while_waiting_neither_hang_nor_lose_grants(redis_client: redis.Redis) -> None:
    # The main thread acquires beside eight threads; a SIGALRM handler raises at
    # random moments, whenever it finds the main thread waiting on a round.
    clock = ManualClock(start=1_000.0)
    name = unique_name("interrupt")
    limiter = TokenBucket(100_000, 0.001, backend=RedisBackend(redis_client), name=name, clock=clock)
    granted = [0]
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(200):
            limiter.acquire()
            with lock:
                granted[0] += 1

    def on_alarm(signum: int, frame: Any) -> None:
        waiting = frame is not None and frame.f_code.co_name == "wait" and "threading" in frame.f_code.co_filename
        if waiting:
            raise Interrupted
        signal.setitimer(signal.ITIMER_REAL, 0.0002)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(8)]
    previous = signal.signal(signal.SIGALRM, on_alarm)
    interrupted = 0
    try:
        for thread in threads:
            thread.start()
        for _ in range(300):
            signal.setitimer(signal.ITIMER_REAL, random.uniform(0.00005, 0.001))
            try:
                limiter.acquire()
                signal.setitimer(signal.ITIMER_REAL, 0)
                with lock:
                    granted[0] += 1
            except Interrupted:
                interrupted += 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive(), "a thread hangs"
    assert interrupted > 0
    # Every grant was used or given back: the budget lost exactly what was granted.
    other = TokenBucket(100_000, 0.001, backend=RedisBackend(redis_client), name=name, clock=clock)
    assert other.try_acquire(100_000 - granted[0])
    assert not other.try_acquire(1)


def test_a_client_that_retries_is_named_at_construction(caplog: pytest.LogCaptureFixture) -> None:
    # redis-py's own default retries ten times with backoff: against a refused port a
    # decision took 3.5-4.6 s before on_unavailable was heard, each one.
    with caplog.at_level("WARNING", logger="ratelimit"):
        RedisBackend(redis.Redis(host="127.0.0.1", port=1))
    assert any("retries failed calls 10 times" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="ratelimit"):
        RedisBackend(redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))).close()
        RedisBackend.from_url("redis://127.0.0.1:1/0").close()
    assert not [r for r in caplog.records if "retries" in r.getMessage()]


def _interrupted_alone_at(k: int) -> tuple[str, int] | None:
    """``acquire(3)`` by a caller alone, a limiter's only caller, interrupted at the
    ``k``-th line it runs in rounds.py: where (``None``: it has fewer lines), once
    checked that later callers go and the budget holds no grant twice."""
    rounds_file = Rounds.reserve.__code__.co_filename
    clock = ManualClock(start=1_000.0)
    client = fakeredis.FakeRedis()
    name = unique_name("alone-interrupt")
    limiter = TokenBucket(100, 0.001, backend=RedisBackend(client), name=name, clock=clock)
    limiter.acquire()  # its first decision (what the code says) made
    rounds = rounds_of(limiter)
    lines = [0]
    at: list[tuple[str, int]] = []
    seen: set[tuple[int, int]] = set()

    def line(frame: Any, event: str, arg: object) -> Any:
        if event != "line":
            return line
        here = (id(frame), frame.f_lineno)
        # A `with` line met again is its exit, where the tracer is called before the
        # lock's release (no signal handler runs there): not an interrupt.
        if here in seen and linecache.getline(rounds_file, frame.f_lineno).strip().startswith("with "):
            return line
        seen.add(here)
        lines[0] += 1
        if lines[0] == k:
            at.append((frame.f_code.co_name, frame.f_lineno))
            raise Interrupted
        return line

    def calls(frame: Any, event: str, arg: object) -> Any:
        return line if frame.f_code.co_filename == rounds_file else None

    sys.settrace(calls)
    try:
        limiter.acquire(3)
    except Interrupted:
        pass
    finally:
        sys.settrace(None)
    if not at:
        return None  # past the last line: the acquire went through uninterrupted
    later = threading.Thread(target=limiter.acquire, daemon=True)
    later.start()
    later.join(5)
    assert not later.is_alive(), f"every later caller waits, after an interrupt at {at[0]}"
    assert not rounds._threads.busy
    assert not rounds._threads.waiting
    # The interrupted grant went back, or was never made (or made and not heard: lost,
    # the budget the poorer for it), never kept as well: 1 + 1 spent, or 3 more.
    other = TokenBucket(100, 0.001, backend=RedisBackend(client), name=name, clock=clock)
    left = sum(1 for _ in iter(lambda: other.try_acquire(1), False))
    assert left in (98, 95), f"{100 - left} spent after an interrupt at {at[0]}"
    return at[0]


def test_a_caller_alone_interrupted_at_any_line_leaves_the_queue_free() -> None:
    # An interrupt (a signal handler raising) may fall between any two lines of a
    # caller's way through, the caller alone's too: between taking the queue and the
    # call, nobody must be left holding it, or every later caller waits for ever. A
    # trace function raising at a line event is an interrupt at that line: tried at
    # each line a caller alone runs in rounds.py, one after the other.
    k = 1
    while _interrupted_alone_at(k) is not None:
        k += 1
    assert k > 10
