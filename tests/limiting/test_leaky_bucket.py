"""LeakyBucket behaviour through the public API, on every store of the backend matrix.
What every limiter promises alike (refunds, requests that can never go, first come
first served, cancelled acquires) is in ``test_every_limiter.py``.

A leaky bucket smooths: grants leave ``1 / leak_per_sec`` apart, never in a burst, and
at most ``capacity`` tokens wait in the bucket; a request that would overflow it is
refused at once whatever its timeout. Limiters are built with ``make`` on the test's
:class:`ManualClock` (1000.0 at the start; a blocking sleep moves it). Where several
reservations must be pending at one instant (many workers), a :class:`HeldClock`
reads the same time but its sleeps do not move it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from ratelimit import AcquireTimeout, LeakyBucket, ManualClock

from held import held, held_clock

Make = Callable[..., Any]


# -- spacing: no bursts -----------------------------------------------------------------


def test_acquires_in_a_row_are_spaced_with_no_burst(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(LeakyBucket, 3, 1)
    # Unlike a token bucket, only the first goes at once: each leaks one interval later.
    assert [limiter.acquire() for _ in range(5)] == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert clock.sleeps == [1.0, 1.0, 1.0, 1.0]
    assert clock.now() == 1_004.0


def test_try_acquire_succeeds_only_when_the_bucket_has_drained(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(LeakyBucket, 3, 1)
    assert limiter.try_acquire()
    assert not limiter.try_acquire()  # not an overflow: it would have to wait 1 s
    clock.advance(0.5)
    assert not limiter.try_acquire()
    clock.advance(0.5)
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    # Idle time banks nothing: after an hour, still one at a time.
    clock.advance(3_600)
    assert [limiter.try_acquire() for _ in range(3)] == [True, False, False]


def test_exact_spacing_boundary(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(LeakyBucket, 2, 4)  # one every 0.25 s
    assert limiter.try_acquire()
    clock.advance(0.125)
    assert not limiter.try_acquire()
    clock.advance(0.125)
    assert limiter.try_acquire()
    assert limiter.acquire() == 0.25
    assert clock.sleeps == [0.25]


def test_weighted_requests_leak_for_their_weight(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(held(LeakyBucket), 10, 2)
    assert limiter.acquire(4) == 0.0  # leaks for 2 s
    assert limiter.acquire(2) == 2.0  # leaks for 1 s
    assert limiter.acquire(1) == 3.0
    assert limiter.acquire(3) == 3.5  # 4 + 2 + 1 = 7 queued, 3 more fit in 10
    with pytest.raises(AcquireTimeout):
        limiter.acquire(0.5)
    assert held_clock(limiter).sleeps == [2.0, 3.0, 3.5]


# -- overflow -------------------------------------------------------------------------


def test_overflow_refuses_at_once_even_without_timeout(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(held(LeakyBucket), 3, 1)
    assert [limiter.acquire() for _ in range(3)] == [0.0, 1.0, 2.0]  # the queue is full
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire()  # timeout=None: still refused, at once
    assert info.value.retry_after == 1.0  # room in 1 s, when the first has leaked
    assert not limiter.try_acquire()
    assert held_clock(limiter).sleeps == [1.0, 2.0]
    clock.advance(0.5)
    with pytest.raises(AcquireTimeout) as later:
        limiter.acquire(timeout=100)
    assert later.value.retry_after == 0.5
    clock.advance(0.5)
    # Room again; the refusals took nothing, so it queues right behind the third.
    assert limiter.acquire() == 2.0


def test_overflow_of_a_weighted_request(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(LeakyBucket, 3, 1)
    assert limiter.acquire(3) == 0.0  # fills the bucket: drains at t=1003
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire()
    assert info.value.retry_after == 1.0
    with pytest.raises(AcquireTimeout) as heavier:
        limiter.acquire(2)
    assert heavier.value.retry_after == 2.0
    assert clock.sleeps == []
    clock.advance(2)
    assert limiter.acquire(2) == 1.0  # room for 2 now; it goes when the 3 have leaked
    assert clock.sleeps == [1.0]


def test_overflow_versus_timeout(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(LeakyBucket, 5, 2)
    assert limiter.acquire(4) == 0.0  # 4 queued, leaking until t=1002
    with pytest.raises(AcquireTimeout) as overflow:
        limiter.acquire(2)  # 4 + 2 > 5: overflow, room in 0.5 s
    assert overflow.value.retry_after == 0.5
    with pytest.raises(AcquireTimeout) as too_long:
        limiter.acquire(1, timeout=1)  # fits, but would wait 2 s
    assert too_long.value.retry_after == 2.0
    assert not limiter.try_acquire(1)
    assert clock.sleeps == []
    assert limiter.acquire(1, timeout=2) == 2.0
    assert clock.sleeps == [2.0]


def test_a_timed_out_request_consumes_nothing(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(held(LeakyBucket), 3, 1)
    assert limiter.acquire() == 0.0
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire(timeout=0.5)
    assert info.value.retry_after == 1.0
    assert held_clock(limiter).sleeps == []
    assert limiter.acquire(timeout=1) == 1.0
    assert limiter.acquire() == 2.0


# -- refund (what every limiter's refund does: test_every_limiter.py) ------------------


def test_refund_never_empties_below_zero(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(held(LeakyBucket), 3, 1)
    limiter.refund(3)  # an empty bucket stays empty: no credit for later
    assert [limiter.acquire() for _ in range(3)] == [0.0, 1.0, 2.0]
    with pytest.raises(AcquireTimeout):
        limiter.acquire()
    # The queued grants are told when to go: a refund cannot free their places.
    limiter.refund(3)
    with pytest.raises(AcquireTimeout) as info:
        limiter.acquire()
    assert info.value.retry_after == 1.0
    # Once they have gone, an empty bucket takes exactly capacity again.
    clock.advance(3)
    limiter.refund(3)
    assert [limiter.acquire() for _ in range(3)] == [0.0, 1.0, 2.0]


def test_a_partial_refund_shortens_the_queue(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(held(LeakyBucket), 10, 2)
    assert limiter.acquire(6) == 0.0  # leaks until t=1003
    limiter.refund(2)  # used only 4: leaks until t=1002
    assert limiter.acquire() == 2.0


# -- asyncio --------------------------------------------------------------------------


def test_async_twins(make: Make, clock: ManualClock) -> None:
    limiter: LeakyBucket = make(LeakyBucket, 2, 1)

    async def scenario() -> None:
        assert [await limiter.acquire_async() for _ in range(3)] == [0.0, 1.0, 1.0]
        assert clock.sleeps == [1.0, 1.0]
        assert not await limiter.try_acquire_async()
        clock.advance(1)
        assert await limiter.try_acquire_async()
        assert await limiter.acquire_async(1) == 1.0
        with pytest.raises(AcquireTimeout) as info:
            await limiter.acquire_async(2)  # overflow: 1 queued + 2 > 2
        assert info.value.retry_after == 1.0
        assert clock.sleeps == [1.0, 1.0, 1.0]

    asyncio.run(scenario())


def test_a_cancelled_middle_place_of_a_full_queue_is_taken_and_the_queue_is_full_again(
    make: Make, clock: ManualClock
) -> None:
    limiter: LeakyBucket = make(held(LeakyBucket), 3, 1)
    held_time = held_clock(limiter)

    async def scenario() -> tuple[float, float]:
        first = await held_time.start(limiter.acquire_async())  # t=1000
        middle = await held_time.start(limiter.acquire_async())  # t=1001
        last = await held_time.start(limiter.acquire_async())  # t=1002
        assert first.done()
        assert held_time.sleeps == [1.0, 2.0]
        middle.cancel()
        with pytest.raises(asyncio.CancelledError):
            await middle
        # The queue (3 tokens) looks full, but the withdrawn place at t=1001 is free:
        # the next request takes it, one interval from its neighbours. Then the
        # queue is full again.
        taken = await held_time.start(limiter.acquire_async())
        with pytest.raises(AcquireTimeout) as info:
            await limiter.acquire_async()
        held_time.release()
        await last
        return await taken, info.value.retry_after

    assert asyncio.run(scenario()) == (1.0, 1.0)
