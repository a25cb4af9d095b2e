"""Composite behaviour through the public API: several limits, granted all-or-nothing.

The members only describe the limits; the composite, built with ``make`` (so it runs
on every store of the backend matrix) on the test's :class:`ManualClock` (1000.0 at
the start; a blocking sleep moves it), keeps their state. A grant happens at the
latest of the members' times; a refusal by any member charges none. Where several
reservations must be pending at one instant (many workers), a :class:`HeldClock`
reads the same time but its sleeps do not move it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from ratelimit import AcquireTimeout, Composite, LeakyBucket, ManualClock, SlidingWindow, TokenBucket

from held import held, held_clock

Make = Callable[..., Any]


# -- all together, at the latest member's time ------------------------------------------


def test_grant_at_the_latest_member_time(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [TokenBucket(3, 1), SlidingWindow(2, 10)])
    # The bucket would allow a third at once; the window only at t=1010.
    assert [limiter.acquire() for _ in range(3)] == [0.0, 0.0, 10.0]
    assert clock.sleeps == [10.0]
    assert clock.now() == 1_010.0


def test_reservations_at_one_instant_follow_the_slowest_member(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(held(Composite), [TokenBucket(3, 1), SlidingWindow(2, 10)])
    waits = [limiter.acquire() for _ in range(5)]
    # Two fit the window at t=1000; then two at t=1010 (the bucket, charged at t=1010,
    # has refilled by then), then t=1020.
    assert waits == [0.0, 0.0, 10.0, 10.0, 20.0]
    assert held_clock(limiter).sleeps == [10.0, 10.0, 20.0]


def test_the_bucket_decides_when_it_is_the_slower(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(held(Composite), [TokenBucket(2, 2), SlidingWindow(100, 60)])
    assert [limiter.acquire() for _ in range(5)] == [0.0, 0.0, 0.5, 1.0, 1.5]


def test_a_leaky_member_spaces_the_grants(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(held(Composite), [SlidingWindow(10, 60), LeakyBucket(3, 2)])
    assert [limiter.acquire() for _ in range(3)] == [0.0, 0.5, 1.0]
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire()  # the leaky member overflows: refused at once, timeout or not
    assert info.value.retry_after == 0.5


# -- all or nothing ---------------------------------------------------------------------


def test_a_denial_by_one_member_charges_no_other(make: Make, clock: ManualClock) -> None:
    # Three per 100 s, and at most one per second.
    limiter: Composite = make(Composite, [SlidingWindow(3, 100), TokenBucket(1, 1)])
    assert limiter.try_acquire()
    assert not limiter.try_acquire()  # the bucket refuses: the window must not be charged
    assert not limiter.try_acquire()
    clock.advance(1)
    assert limiter.try_acquire()
    clock.advance(1)
    assert limiter.try_acquire()  # the third of the window: the refusals took none
    clock.advance(1)
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=0)
    assert info.value.retry_after == 97.0  # the window's first grant ages out at t=1100


def test_a_timed_out_request_charges_no_member(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [TokenBucket(3, 0.1), SlidingWindow(2, 10)])
    assert [limiter.acquire() for _ in range(2)] == [0.0, 0.0]  # the bucket keeps 1 of 3
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=5)  # the window needs 10 s
    assert info.value.retry_after == 10.0
    assert clock.sleeps == []
    with pytest.raises(AcquireTimeout) as again:
        limiter.acquire(timeout=9)
    assert again.value.retry_after == 10.0
    clock.advance(10)
    # The bucket has 1 + 10 * 0.1 = 2, the window 2: nothing went to the refused requests.
    assert limiter.try_acquire(2)
    assert not limiter.try_acquire()


def test_an_overflowing_member_charges_no_other(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [TokenBucket(5, 0.01), LeakyBucket(1, 1)])
    assert limiter.acquire() == 0.0  # the leaky member is full until t=1001
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire()
    assert info.value.retry_after == 1.0
    with pytest.raises(AcquireTimeout):
        limiter.acquire(timeout=60)
    assert clock.sleeps == []
    clock.advance(1)
    # The bucket still has 4 (+0.01): the overflows took nothing from it.
    assert limiter.try_acquire([4, 1])
    assert not limiter.try_acquire([0.5, 1])


# -- per-member weights ---------------------------------------------------------------------


def test_per_member_token_sequences(make: Make, clock: ManualClock) -> None:
    # 10 requests (1 per second) and 64 tokens (8 per second): an LLM-style pair.
    limiter: Composite = make(Composite, [TokenBucket(10, 1), TokenBucket(64, 8)])
    assert limiter.acquire([1, 40]) == 0.0
    assert limiter.acquire([1, 40]) == 2.0  # 16 tokens short, at 8 per second
    assert limiter.acquire([1, 8]) == 1.0
    assert limiter.try_acquire([7, 0.5]) is False  # the token member is empty
    clock.advance(0.25)
    assert limiter.try_acquire([7, 2])
    assert limiter.acquire([1, 1]) == 0.125
    assert clock.sleeps == [2.0, 1.0, 0.125]


def test_one_number_charges_every_member(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [TokenBucket(3, 1), TokenBucket(5, 1)])
    assert limiter.try_acquire(3)  # 3 from each: 0 and 2 left
    assert not limiter.try_acquire([0.5, 0.5])
    clock.advance(1)  # 1 and 3
    assert not limiter.try_acquire([1, 3.5])
    assert limiter.try_acquire([1, 3])


def test_weights_are_validated_per_member(make: Make) -> None:
    limiter: Composite = make(Composite, [TokenBucket(3, 1), SlidingWindow(5, 10)])
    with pytest.raises(ValueError, match="one number per limit"):
        limiter.acquire([1, 1, 1])
    with pytest.raises(ValueError, match="capacity"):
        limiter.try_acquire(4)  # fits the window, never the bucket
    with pytest.raises(ValueError, match="limit"):
        limiter.try_acquire([1, 6])
    with pytest.raises(ValueError, match="at least one limit more than 0"):
        limiter.try_acquire([0, 0])
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        limiter.try_acquire([1, -1])
    assert limiter.try_acquire([3, 5])


def test_a_member_given_0_is_left_out(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [TokenBucket(1, 1), TokenBucket(10, 1)])
    assert limiter.try_acquire([0, 5])
    assert limiter.try_acquire([1, 5])  # the first member was untouched
    assert not limiter.try_acquire([1, 0])


def test_members_keep_their_own_state(make: Make, clock: ManualClock) -> None:
    # The members describe the limits; the composite keeps its own state for them.
    bucket = TokenBucket(1, 1, clock=clock)
    limiter: Composite = make(Composite, [bucket])
    assert limiter.try_acquire()
    assert bucket.try_acquire()
    assert not limiter.try_acquire()
    assert not bucket.try_acquire()


def test_a_leaky_member_counts_only_what_is_queued(make: Make, clock: ManualClock) -> None:
    """A leaky member granted later than its own queue would (another limit sets the
    time) is idle until then: that idle time is not counted as queued."""
    limiter: Composite = make(held(Composite), [TokenBucket(1, 0.1), LeakyBucket(2, 1)])
    assert [limiter.acquire() for _ in range(2)] == [0.0, 10.0]  # the bucket's pace: t=1000, t=1010
    clock.advance(1)
    # t=1001: the first has leaked; one request waits, in a leaky queue of 2. A third
    # fits the queue and goes when the bucket allows, at t=1020.
    assert limiter.peek() == 19.0
    assert limiter.acquire() == 19.0
    # Two wait now (t=1010, t=1020): the queue is full, a fourth overflows.
    with pytest.raises(AcquireTimeout):
        limiter.acquire()


# -- asyncio --------------------------------------------------------------------------


def test_async_twins(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [TokenBucket(3, 1), SlidingWindow(2, 10)])

    async def scenario() -> None:
        assert [await limiter.acquire_async() for _ in range(3)] == [0.0, 0.0, 10.0]
        assert clock.sleeps == [10.0]
        # t=1010: the window has one place left; the bucket is full again.
        assert await limiter.try_acquire_async()
        assert not await limiter.try_acquire_async()
        with pytest.raises(AcquireTimeout) as info:
            await limiter.acquire_async([1, 1], timeout=5)
        assert info.value.retry_after == 10.0
        await limiter.refund_async()
        assert await limiter.try_acquire_async()
        assert clock.sleeps == [10.0]

    asyncio.run(scenario())


def test_cancelled_acquire_async_gives_back_to_every_member(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(held(Composite), [TokenBucket(1, 1), SlidingWindow(2, 10)])
    held_time = held_clock(limiter)

    async def scenario() -> None:
        assert await limiter.acquire_async() == 0.0
        task = await held_time.start(limiter.acquire_async())
        assert not task.done()
        assert held_time.sleeps == [1.0]  # reserved in both members for t=1001
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(AcquireTimeout) as info:
            await limiter.acquire_async(timeout=0.5)
        assert info.value.retry_after == 1.0
        clock.advance(1)
        # Had the reservation stayed, the bucket would refuse until t=1002 and the
        # window would be full until t=1010.
        assert await limiter.try_acquire_async()
        assert not await limiter.try_acquire_async()

    asyncio.run(scenario())
