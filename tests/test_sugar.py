"""Decorators, context managers, and an interrupted wait giving its reservation back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from ratelimit import ManualClock, TokenBucket

Make = Callable[..., Any]


def test_decorator_on_a_plain_function(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 1)

    @limiter
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    assert [double(i) for i in range(3)] == [0, 2, 4]
    assert clock.sleeps == [1.0]
    assert double.__name__ == "double"
    assert double.__doc__ == "Twice x."


def test_decorator_on_a_coroutine_function_with_a_weight(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 4, 2)

    @limiter.decorate(tokens=2)
    async def fetch(x: int) -> int:
        return x + 1

    async def scenario() -> list[int]:
        return [await fetch(i) for i in range(3)]

    assert asyncio.run(scenario()) == [1, 2, 3]
    assert clock.sleeps == [1.0]


def test_context_managers(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 1, 1)
    with limiter:
        pass
    with limiter:
        pass
    assert clock.sleeps == [1.0]

    async def scenario() -> None:
        async with limiter:
            pass

    asyncio.run(scenario())
    assert clock.sleeps == [1.0, 1.0]


class InterruptingClock(ManualClock):
    """Ctrl-C arrives while the limiter sleeps."""

    def sleep(self, seconds: float) -> None:
        raise KeyboardInterrupt


def test_an_interrupted_acquire_gives_its_reservation_back(make: Make) -> None:
    clock = InterruptingClock(1_000.0)
    limiter = make(TokenBucket, 1, 1, clock=clock)
    assert limiter.try_acquire()
    with pytest.raises(KeyboardInterrupt):
        limiter.acquire()  # reserved for t=1001, then interrupted
    clock.advance(1)
    # The interrupted reservation was the last in line: its slot is free again.
    assert limiter.try_acquire()
    assert not limiter.try_acquire()


class Parked(ManualClock):
    """An async sleep that never ends by itself: the caller must be cancelled."""

    async def sleep_async(self, seconds: float) -> None:
        await asyncio.Event().wait()


def test_a_cancelled_async_acquire_gives_its_reservation_back(make: Make) -> None:
    clock = Parked(1_000.0)
    parked: TokenBucket = make(TokenBucket, 1, 1, clock=clock)

    async def scenario() -> bool:
        assert await parked.try_acquire_async()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(parked.acquire_async(), timeout=0.05)
        return await parked.try_acquire_async()

    # The clock did not move: the grant that was cancelled is simply not made.
    assert asyncio.run(scenario()) is False
    clock.advance(1)
    assert parked.try_acquire()
    assert not parked.try_acquire()
