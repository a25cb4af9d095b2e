"""TokenBucket behaviour through the public API, on every store of the backend matrix.
What every limiter promises alike (refunds, requests that can never go, first come
first served, cancelled acquires) is in ``test_every_limiter.py``.

Every limiter is built with the ``make`` fixture and runs on the test's
:class:`ManualClock` (starting at 1000.0), whose ``sleep`` advances the clock: a
blocking ``acquire`` that waits moves time forward by exactly its wait. Where a test
needs several reservations pending at the same instant (many workers), it swaps in a
:class:`HeldClock`, which reads the same time but whose sleeps do not move it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ratelimit import AcquireTimeout, ManualClock, RateLimitError, TokenBucket

from held import held, held_clock

Make = Callable[..., Any]


# -- burst and sustained rate ---------------------------------------------------------


def test_burst_then_sustained_rate(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 3, 1)
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]
    clock.advance(0.5)
    assert not limiter.try_acquire()
    clock.advance(0.5)
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    clock.advance(2)
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    assert clock.sleeps == []


def test_an_idle_bucket_refills_to_capacity_only(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 3, 1)
    assert limiter.try_acquire()
    clock.advance(3_600)
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]


def test_acquires_in_a_row_are_spaced_by_the_refill_interval(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 3, 1)
    # The burst is free; after it each acquire sleeps one interval (and the sleep moves the clock).
    assert [limiter.acquire() for _ in range(5)] == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert clock.sleeps == [1.0, 1.0]
    assert clock.now() == 1_002.0


def test_exact_refill_boundary(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 4)  # one token every 0.25 s
    assert [limiter.try_acquire() for _ in range(3)] == [True, True, False]
    clock.advance(0.125)
    assert not limiter.try_acquire()
    clock.advance(0.125)
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    assert limiter.acquire() == 0.25
    assert clock.sleeps == [0.25]


def test_slow_refill_rate(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 1, 0.5)  # one token every 2 s
    assert limiter.acquire() == 0.0
    assert limiter.acquire() == 2.0
    assert limiter.acquire() == 2.0
    assert clock.now() == 1_004.0


# -- weighted requests ----------------------------------------------------------------


def test_weighted_tokens(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 10, 2)
    assert limiter.acquire(7) == 0.0
    assert not limiter.try_acquire(4)  # 3 left
    assert limiter.try_acquire(3)
    assert limiter.acquire(4) == 2.0  # 4 tokens at 2 per second
    assert limiter.acquire(10) == 5.0  # a whole bucket: 10 tokens at 2 per second
    assert clock.sleeps == [2.0, 5.0]


def test_fractional_tokens(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 1, 1)
    assert [limiter.try_acquire(0.25) for _ in range(5)] == [True, True, True, True, False]
    clock.advance(0.5)
    assert limiter.try_acquire(0.5)
    assert not limiter.try_acquire(0.25)


# -- timeouts -------------------------------------------------------------------------


def test_timeout_raises_at_once_and_consumes_nothing(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 3, 1)
    assert limiter.acquire(3) == 0.0
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=0.5)
    assert info.value.retry_after == 1.0
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value, RateLimitError)
    assert clock.sleeps == []
    assert clock.now() == 1_000.0
    # Refused again, with the same answer: the first refusal reserved nothing.
    with pytest.raises(AcquireTimeout) as again:
        limiter.acquire(timeout=timedelta(seconds=0.75))
    assert again.value.retry_after == 1.0
    with pytest.raises(AcquireTimeout) as heavier:
        limiter.acquire(2, timeout=1.5)
    assert heavier.value.retry_after == 2.0
    # A wait equal to the timeout is within it.
    assert limiter.acquire(timeout=1.0) == 1.0
    assert clock.sleeps == [1.0]


def test_timeout_zero_is_a_non_blocking_acquire(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 1, 1)
    assert limiter.acquire(timeout=0) == 0.0
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=0)
    assert info.value.retry_after == 1.0
    clock.advance(1)
    assert limiter.acquire(timeout=0) == 0.0
    assert clock.sleeps == []


def test_a_timed_out_request_leaves_the_queue_as_it_was(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(held(TokenBucket), 2, 1)
    assert [limiter.acquire() for _ in range(4)] == [0.0, 0.0, 1.0, 2.0]
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=2.5)
    assert info.value.retry_after == 3.0
    # The next one is planned exactly where the refused one would have been.
    assert limiter.acquire() == 3.0
    assert held_clock(limiter).sleeps == [1.0, 2.0, 3.0]


# -- reservations: FIFO, evenly spaced (every limiter's: test_every_limiter.py) ----------


def test_time_passing_does_not_shorten_a_queue_reserved_ahead(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(held(TokenBucket), 3, 1)
    assert [limiter.acquire() for _ in range(7)] == [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0]
    # Two seconds later the queue still runs to t=1004: the next slot is t=1005.
    clock.advance(2)
    assert not limiter.try_acquire()
    assert limiter.acquire(timeout=3) == 3.0


def test_weighted_reservations_queue_behind_each_other(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(held(TokenBucket), 4, 2)
    assert limiter.acquire(4) == 0.0
    assert limiter.acquire(3) == 1.5
    assert limiter.acquire(1) == 2.0
    assert limiter.acquire(4) == 4.0


# -- refund (what every limiter's refund does: test_every_limiter.py) ------------------


def test_a_refund_of_several_tokens_lets_a_request_of_as_many_go(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 3, 1)
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]
    limiter.refund(2)
    assert limiter.try_acquire(2)
    assert not limiter.try_acquire()


def test_refund_of_a_waited_grant(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 1, 1)
    assert limiter.acquire() == 0.0
    assert limiter.acquire() == 1.0  # sleeps to t=1001, the bucket empty again
    limiter.refund()
    assert limiter.try_acquire()
    assert not limiter.try_acquire()


def test_refund_while_reservations_are_pending_keeps_the_bound(make: Make, clock: ManualClock) -> None:
    # capacity 1, 1 token/s. A (t=1000), B (t=1001), C (t=1002) reserve at one instant;
    # A is refunded (never sent). The sends are B at 1001 and C at 1002; a new request D
    # must not go at 1002 too: two sends in one instant exceed a capacity of 1 (and three
    # in [1001, 1002] exceed capacity + rate * 1 = 2). It may go at 1003.
    limiter: TokenBucket = make(held(TokenBucket), 1, 1)
    assert [limiter.acquire() for _ in range(3)] == [0.0, 1.0, 2.0]
    limiter.refund()
    assert limiter.acquire() == 3.0  # actually 2.0


# -- asyncio --------------------------------------------------------------------------


def test_async_twins(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 3, 1)

    async def scenario() -> None:
        assert [await limiter.acquire_async() for _ in range(5)] == [0.0, 0.0, 0.0, 1.0, 1.0]
        assert clock.sleeps == [1.0, 1.0]
        assert not await limiter.try_acquire_async()
        with pytest.raises(AcquireTimeout) as info:
            await limiter.acquire_async(timeout=0.5)
        assert info.value.retry_after == 1.0
        assert clock.sleeps == [1.0, 1.0]
        clock.advance(1)
        assert await limiter.try_acquire_async()
        await limiter.refund_async()
        assert await limiter.try_acquire_async()
        assert not await limiter.try_acquire_async()

    asyncio.run(scenario())


def test_async_tokens_and_timeout_validation(make: Make) -> None:
    limiter: TokenBucket = make(TokenBucket, 3, 1)

    async def scenario() -> None:
        with pytest.raises(ValueError, match="capacity"):
            await limiter.acquire_async(4)
        with pytest.raises(ValueError, match="timeout"):
            await limiter.acquire_async(timeout=-0.5)
        assert await limiter.acquire_async(3) == 0.0

    asyncio.run(scenario())


def test_cancelled_by_wait_for_wastes_nothing(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(held(TokenBucket), 1, 1)
    held_time = held_clock(limiter)

    async def scenario() -> None:
        assert await limiter.acquire_async() == 0.0
        task = await held_time.start(limiter.acquire_async())  # reserved for t=1001, asleep
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(task, 0)  # gives up on it: cancels the task
        assert task.cancelled()
        assert held_time.sleeps == [1.0]
        clock.advance(1)
        assert await limiter.try_acquire_async()

    asyncio.run(scenario())
