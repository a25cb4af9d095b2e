"""Cancelling waiting acquires, anywhere in the queue, wastes nothing and breaks nothing.

Before: ``TokenBucket(1, 10)``, 60 ``asyncio.wait_for(lim.acquire_async(), 0.5)``, 55
cancelled, then ``acquire_async(timeout=0)`` raised with ``retry_after`` 5.3 s where
about one interval is right (the same for ``LeakyBucket`` and through Redis): only the
last reservation queued could give its place back.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import (
    AcquireTimeout,
    Composite,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)
from ratelimit._algorithm import Algorithm, step_all
from ratelimit._gcra import Gcra
from ratelimit._holes import Hole, give_back, reserve
from ratelimit._leaky_bucket import LeakyQueue
from ratelimit._sliding_window import WindowLog

from conftest import REDIS_URL, unique_name
from held import held, held_clock

Make = Callable[..., Any]

# -- the bound, whatever is withdrawn -------------------------------------------------

LIMITS: dict[str, Callable[[], list[Algorithm[Any]]]] = {
    "token_bucket": lambda: [Gcra(3.0, 2.0)],
    "leaky_bucket": lambda: [LeakyQueue(4.0, 2.0)],
    "sliding_window": lambda: [WindowLog(3.0, 1.5)],
    "composite": lambda: [Gcra(2.0, 4.0), WindowLog(5.0, 2.0)],
}

operations = st.lists(
    st.one_of(
        st.tuples(st.just("reserve"), st.sampled_from([1.0, 1.0, 2.0, 0.5]), st.sampled_from([0.0, 1.0, 1e9])),
        st.tuples(st.just("withdraw"), st.integers(0, 30), st.just(0.0)),
        st.tuples(st.just("advance"), st.sampled_from([0.01, 0.1, 0.25, 0.5, 1.0]), st.just(0.0)),
    ),
    max_size=80,
)


def _replays(algs: Sequence[Algorithm[Any]], grants: list[tuple[float, Sequence[float]]]) -> bool:
    """Whether a fresh limit grants every one of ``grants`` at its own time, without waiting."""
    states = [alg.new_state() for alg in algs]
    for at, tokens in sorted(grants, key=lambda grant: grant[0]):
        states, wait = step_all(algs, states, at, tokens, 0.0)
        if wait < 0:
            return False
    return True


@pytest.mark.parametrize("kind", list(LIMITS))
@settings(max_examples=300, deadline=None)
@given(ops=operations)
def test_what_stays_granted_never_exceeds_the_limit(kind: str, ops: list[tuple[str, float, float]]) -> None:
    algs = LIMITS[kind]()
    states = [alg.new_state() for alg in algs]
    holes: list[Hole] = []
    now = 1_000.0
    granted: list[tuple[float, Sequence[float]]] = []
    for op, a, b in ops:
        if op == "advance":
            now += a
        elif op == "reserve":
            weights = [min(a, alg.most) for alg in algs]
            states, wait = reserve(algs, states, holes, now, weights, b)
            if wait >= 0:
                granted.append((now + wait, weights))
        else:
            ahead = [i for i, (at, _) in enumerate(granted) if at > now]
            if ahead:
                at, back = granted.pop(ahead[int(a) % len(ahead)])
                states = give_back(algs, states, holes, now, back, at)
        # What is still granted (made or promised) is what the limit allows.
        assert _replays(algs, granted)


def test_withdrawing_every_reservation_restores_the_state() -> None:
    # Withdrawn in any order, all of them: the queue is back to what it was.
    for seed in range(50):
        shuffle = random.Random(seed)
        algs: list[Algorithm[Any]] = [Gcra(1.0, 10.0)]
        states = [algs[0].new_state()]
        holes: list[Hole] = []
        reservations = []
        for _ in range(60):
            states, wait = reserve(algs, states, holes, 1_000.0, [1.0], 1e9)
            reservations.append(1_000.0 + wait)
        withdrawn = reservations[5:]
        shuffle.shuffle(withdrawn)
        for at in withdrawn:
            states = give_back(algs, states, holes, 1_000.0, [1.0], at)
        assert holes == []
        assert states[0] == pytest.approx(1_000.5)  # five grants' worth, as before


# -- the scenario, on every store ---------------------------------------------

SCENARIOS: dict[str, Callable[[], tuple[Any, ...]]] = {
    # One grant per 100 ms, each: (limiter class, arguments, retry_after after the 55).
    "token_bucket": lambda: (TokenBucket, (1, 10), {}),
    "leaky_bucket": lambda: (LeakyBucket, (60, 10), {}),
    "sliding_window": lambda: (SlidingWindow, (1, 0.1), {}),
}


@pytest.mark.parametrize("kind", list(SCENARIOS))
def test_fifty_five_of_sixty_cancelled_give_every_place_back(make: Make, clock: ManualClock, kind: str) -> None:
    cls, args, kwargs = SCENARIOS[kind]()
    limiter = make(held(cls), *args, **kwargs)
    held_time = held_clock(limiter)

    async def scenario() -> float:
        tasks = [await held_time.start(limiter.acquire_async()) for _ in range(60)]
        cancelled = tasks[5:]
        random.Random(7).shuffle(cancelled)
        for task in cancelled:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        with pytest.raises(AcquireTimeout) as info:
            await limiter.acquire_async(timeout=0)
        held_time.release()
        return info.value.retry_after

    # The five kept go at 0, 0.1 .. 0.4 s: the next place is 0.5 s away (was 6.0).
    assert asyncio.run(scenario()) == pytest.approx(0.5)


@pytest.mark.parametrize("kind", list(SCENARIOS))
def test_places_cancelled_mid_queue_go_to_the_next_requests(make: Make, clock: ManualClock, kind: str) -> None:
    cls, args, kwargs = SCENARIOS[kind]()
    limiter = make(held(cls), *args, **kwargs)
    held_time = held_clock(limiter)

    async def scenario() -> list[float]:
        tasks = [await held_time.start(limiter.acquire_async()) for _ in range(30)]
        for task in tasks[10:20]:  # the places at 1.0 .. 1.9 s; 2.0 .. 2.9 s stay
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        newcomers = [await held_time.start(limiter.acquire_async()) for _ in range(11)]
        held_time.release()
        return [await task for task in newcomers]

    waits = asyncio.run(scenario())
    assert waits == pytest.approx([1.0 + i / 10 for i in range(10)] + [3.0])


def test_a_composite_gives_cancelled_places_back_to_all_its_limits(make: Make, clock: ManualClock) -> None:
    limiter = make(held(Composite), [TokenBucket(1, 10), SlidingWindow(100, 60)])
    held_time = held_clock(limiter)

    async def scenario() -> tuple[float, float]:
        tasks = [await held_time.start(limiter.acquire_async()) for _ in range(20)]
        for task in tasks[5:10]:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        newcomer = await held_time.start(limiter.acquire_async())
        for task in tasks[10:]:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        with pytest.raises(AcquireTimeout) as info:
            await limiter.acquire_async(timeout=0)
        held_time.release()
        return await newcomer, info.value.retry_after

    # The newcomer takes the place at 0.5 s; once the rest are withdrawn, the queue
    # ends with it, and the window has kept only the six grants still standing.
    assert asyncio.run(scenario()) == pytest.approx((0.5, 0.6))


# -- for real: wait_for and real time ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("store", ["memory", "redis"])
@pytest.mark.parametrize("cls", [TokenBucket, LeakyBucket])
def test_wait_for_wastes_nothing_in_real_time(store: str, cls: type[Any], request: pytest.FixtureRequest) -> None:
    if store == "redis":
        request.getfixturevalue("redis_client")
    backend = MemoryBackend() if store == "memory" else RedisBackend.from_url(REDIS_URL)
    capacity = 1 if cls is TokenBucket else 60
    limiter: TokenBucket | LeakyBucket = cls(capacity, 10, backend=backend, name=unique_name())

    async def scenario() -> float:
        async def one() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(limiter.acquire_async(), 0.5)

        await asyncio.gather(*(one() for _ in range(60)))
        try:
            return await limiter.acquire_async(timeout=0.3)
        finally:
            if isinstance(backend, RedisBackend):
                await backend.aclose()

    # Was a 5.3 s retry_after: now the next place is at most one interval away
    # (generous for a loaded machine).
    assert asyncio.run(scenario()) <= 0.3
